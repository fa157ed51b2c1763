"""Serve the messenger fakes until interrupted, for manual runs and benchmarks:

    python -m tests.fakes [--telegram-port 8081] [--viber-port 8082] [--whatsapp-port 8083] [--delay 0.05]

Prints one line per fake: its name, the API base URL to configure (``BATON_<NAME>_API_URL``) and, for
the fake to accept calls, a bot token / auth token / phone number id with its access token and app secret.
"""
from __future__ import annotations

import argparse
import signal
import threading

from tests.fakes.telegram import FakeTelegram
from tests.fakes.viber import FakeViber
from tests.fakes.whatsapp import FakeWhatsApp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--telegram-port", type=int, default=0)
    parser.add_argument("--viber-port", type=int, default=0)
    parser.add_argument("--whatsapp-port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before every answer")
    args = parser.parse_args()
    telegram = FakeTelegram(args.telegram_port).start()
    viber = FakeViber(args.viber_port).start()
    whatsapp = FakeWhatsApp(args.whatsapp_port).start()
    for fake in (telegram, viber, whatsapp):
        fake.delay_s = args.delay
    number, access_token = whatsapp.add_number()
    print(f"telegram {telegram.api_url} bot_token={telegram.add_bot()}", flush=True)
    print(f"viber {viber.api_url} auth_token={viber.add_account()}", flush=True)
    print(f"whatsapp {whatsapp.api_url} phone_number_id={number} access_token={access_token} "
          f"app_secret={whatsapp.app_secret}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    for fake in (telegram, viber, whatsapp):
        fake.stop()


if __name__ == "__main__":
    main()
