"""The pieces every messenger shares: text splitting, settings checks, quoting, the HTTPS rule."""
from __future__ import annotations

import pytest

from engine.chat.messengers.connection import quote, require_public_https, webhook_url
from engine.chat.messengers.items import Attachment, as_id, as_int, header, same_secret
from engine.chat.messengers.sending import split_text, utf16_length
from engine.errors import InvalidParamsError


# --- splitting -----------------------------------------------------------------------------------------

def test_a_text_within_the_limit_is_one_part_unchanged():
    assert split_text("  hello\n\nworld  ", 20) == ["  hello\n\nworld  "]
    assert split_text("exactly10!", 10) == ["exactly10!"]


def test_parts_are_cut_at_the_last_whitespace_and_lose_it():
    assert split_text("aaa bbb ccc ddd", 8) == ["aaa bbb", "ccc ddd"]
    assert split_text("aaa bbb ccc ddd", 7) == ["aaa bbb", "ccc ddd"]
    assert split_text("aaa   bbb", 4) == ["aaa", "bbb"]


def test_a_newline_in_the_second_half_is_preferred_to_a_later_space():
    assert split_text("first line\nsecond part here", 20) == ["first line", "second part here"]
    assert split_text("a\nbbbbbbbbbbbb cc", 16) == ["a\nbbbbbbbbbbbb", "cc"]


def test_a_word_longer_than_the_limit_is_cut_hard():
    assert split_text("abcdefghij klm", 4) == ["abcd", "efgh", "ij", "klm"]


def test_limits_count_utf16_units_so_emoji_never_overflow():
    text = "😀" * 5                                               # 10 UTF-16 units
    assert utf16_length(text) == 10
    assert split_text(text, 4) == ["😀😀", "😀😀", "😀"]
    assert all(utf16_length(part) <= 9 for part in split_text("😀 " * 100, 9))


def test_joining_the_parts_gives_the_words_back_in_order():
    words = [f"w{n}" * (n % 7 + 1) for n in range(500)]
    text = " ".join(words)
    parts = split_text(text, 50)
    assert all(utf16_length(p) <= 50 for p in parts)
    assert " ".join(parts).split() == words


# --- small readers -----------------------------------------------------------------------------------

def test_ids_and_integers_are_read_leniently_but_never_from_absurd_values():
    assert [as_id(v) for v in (42, "a-1", True, "", " x", "x" * 256, None, 1.5)] == [
        "42", "a-1", None, None, None, None, None, None]
    assert [as_int(v) for v in (3, "17", True, "x", None, " 4 ")] == [3, 17, None, None, None, 4]
    assert header({"x-a": "1"}, "X-A") == "1" and header({}, "X-A") is None
    assert not same_secret(None, "x") and not same_secret("x", None) and same_secret("é", "é")
    assert Attachment("photo", file_id="f").to_dict() == {"type": "photo", "file_id": "f"}


# --- connecting ----------------------------------------------------------------------------------------

def test_messengers_only_call_https_urls_outside_development():
    for public_url, words in [(None, "(it is unset)"), ("http://baton.example", "(it is 'http://baton.example')")]:
        with pytest.raises(InvalidParamsError) as refused:
            require_public_https("Telegram", public_url, allow_private=False)
        assert refused.value.message == ("Telegram only calls HTTPS webhook URLs: set BATON_PUBLIC_URL to the "
                                         f"public https:// address of this server {words}.")
        assert refused.value.data == {"param": "type", "config": "BATON_PUBLIC_URL"}
    require_public_https("Telegram", "https://baton.example", allow_private=False)
    require_public_https("Telegram", "http://127.0.0.1:5000", allow_private=True)


def test_webhook_urls_are_built_on_the_public_url():
    assert webhook_url("https://b.example/", "/webhooks/telegram") == "https://b.example/webhooks/telegram"
    assert webhook_url("https://b.example/baton", "/channels/viber/inbound", channel="k1") == \
        "https://b.example/baton/channels/viber/inbound?channel=k1"


def test_a_quoted_messenger_error_never_shows_a_secret_and_stays_short():
    assert quote("Invalid token 123:SECRET given", ["123:SECRET"]) == "Invalid token [secret] given"
    assert quote(None) == "no description" and quote("  \n ") == "no description"
    assert quote("a\n  b") == "a b"
    assert len(quote("x" * 1000)) == 300

