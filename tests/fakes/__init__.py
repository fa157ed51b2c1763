"""Local servers that speak Telegram's, Viber's and WhatsApp's real protocols, for tests and benchmarks."""
