"""The messengers' wire protocols (Telegram, Viber, WhatsApp): no database, no engine state.

``protocol`` says what every messenger does (``Messenger``: its settings, connecting a channel,
verifying and parsing inbound calls into ``items``, building outbound calls and classifying the
answers into ``sending`` outcomes); one package per messenger implements it; ``registry`` holds them
by channel type. Every HTTP call goes through an injected ``engine.outbound.OutboundHttp``; API base
URLs are parameters.
"""
