"""Chat: channels, conversations and the messengers Baton talks to."""
