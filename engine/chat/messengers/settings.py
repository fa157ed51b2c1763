"""The ``settings`` of a messenger channel (INTERFACE §4.4): exactly the documented keys, each checked
for shape before any of it reaches a URL or a header, and which of them are secrets."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.errors import InvalidParamsError

# Printable ASCII without spaces: what fits in an HTTP header or a URL path segment unharmed.
_TOKEN = re.compile(r"^[\x21-\x7e]+$")


@dataclass(frozen=True)
class Setting:
    """One key of ``settings``: its pattern and length bounds, whether it is secret, what it is for."""

    name: str
    pattern: re.Pattern[str]
    max_length: int
    secret: bool
    meaning: str                        # "the bot token from @BotFather": completes error messages
    min_length: int = 1
    optional: bool = False              # may be left out (then absent from the stored settings)
    flag: bool = False                  # true or false rather than a string


@dataclass(frozen=True)
class SettingsSpec:
    """The settings of one channel type; every key is required unless it is ``optional``."""

    channel_type: str
    settings: tuple[Setting, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(setting.name for setting in self.settings)

    @property
    def secret_names(self) -> tuple[str, ...]:
        return tuple(setting.name for setting in self.settings if setting.secret)

    def check(self, given: Any) -> dict[str, str]:
        """The settings as given, checked: an object with exactly these keys, each a string of the
        right shape. InvalidParamsError names the key (``data.param`` = ``settings.<key>``)."""
        if not isinstance(given, Mapping):
            raise _invalid("settings", f"Parameter 'settings' must be an object with "
                                       f"{_listing(self.names)} for a {self.channel_type} channel.")
        unknown = sorted(str(key) for key in given if key not in self.names)
        if unknown:
            raise _invalid("settings", f"Unknown setting(s) {_listing(unknown)} for a {self.channel_type} "
                                       f"channel; its settings are {_listing(self.names)}.")
        missing = [setting.name for setting in self.settings if setting.name not in given and not setting.optional]
        if missing:
            raise _invalid(f"settings.{missing[0]}",
                           f"Missing setting(s) {_listing(missing)} for a {self.channel_type} channel.")
        return {setting.name: _checked(setting, given[setting.name]) for setting in self.settings
                if setting.name in given and not (setting.optional and given[setting.name] is None)}

    def shown(self, stored: Mapping[str, Any]) -> dict[str, Any]:
        """The settings without their secrets, for any answer (secrets are never returned)."""
        return {name: stored[name] for name in self.names if name not in self.secret_names and name in stored}

    def secrets_of(self, stored: Mapping[str, Any]) -> list[str]:
        """The secret values, e.g. to keep them out of a quoted messenger error."""
        return [str(stored[name]) for name in self.secret_names if stored.get(name)]


def _checked(setting: Setting, value: Any) -> str | bool:
    where = f"settings.{setting.name}"
    if setting.flag:
        if not isinstance(value, bool):
            raise _invalid(where, f"Setting '{setting.name}' must be true or false ({setting.meaning}).")
        return value
    if not isinstance(value, str):
        raise _invalid(where, f"Setting '{setting.name}' must be a string ({setting.meaning}).")
    if not setting.min_length <= len(value) <= setting.max_length:
        raise _invalid(where, f"Setting '{setting.name}' must be {setting.min_length} to "
                              f"{setting.max_length} characters ({setting.meaning}).")
    if not setting.pattern.fullmatch(value):
        raise _invalid(where, f"Setting '{setting.name}' does not look like {setting.meaning}.")
    return value


def _invalid(param: str, message: str) -> InvalidParamsError:
    return InvalidParamsError(message, data={"param": param})


def _listing(names: list[str] | tuple[str, ...]) -> str:
    return ", ".join(f"'{name}'" for name in names)


def token_setting(name: str, meaning: str, *, max_length: int = 512, secret: bool = True) -> Setting:
    """A credential that goes into a header or a URL: printable ASCII, no spaces."""
    return Setting(name, _TOKEN, max_length, secret, meaning)


def text_setting(name: str, meaning: str, *, max_length: int) -> Setting:
    """A human-readable value (a display name): any characters but control characters, not blank."""
    return Setting(name, re.compile(r"^(?=.*\S)[^\x00-\x1f\x7f]+$"), max_length, False, meaning)


def digits_setting(name: str, meaning: str, *, max_length: int = 32) -> Setting:
    """A numeric id that goes into a URL path."""
    return Setting(name, re.compile(r"^[0-9]+$"), max_length, False, meaning)


def message_setting(name: str, meaning: str, *, max_length: int) -> Setting:
    """An optional text to send (a welcome message): lines allowed, no other control characters."""
    return Setting(name, re.compile(r"(?s)^(?=.*\S)[^\x00-\x09\x0b-\x1f\x7f]+$"), max_length, False, meaning,
                   optional=True)


def flag_setting(name: str, meaning: str) -> Setting:
    """An optional switch, true or false (off when left out); not a secret."""
    return Setting(name, re.compile(""), 0, False, meaning, min_length=0, optional=True, flag=True)
