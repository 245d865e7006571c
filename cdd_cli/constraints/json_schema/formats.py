"""The judge's formats: exact checks of RFC 3339 (date, time, date-time, duration), RFC 5321
(email), RFC 4122 (uuid), dotted-quad ipv4, RFC 1123 with IDNA 2008 A-labels (hostname),
RFC 4291 (ipv6) and RFC 3986 (uri), for every format cdd writes (`format_checker`).
jsonschema's own checker skips time and date-time unless rfc3339-validator is installed, and
takes any text with an '@' for an e-mail address."""

from __future__ import annotations

import ipaddress
import re

import idna
import jsonschema

from cdd_cli.constraints.json_schema.grammar import DURATION

_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_TIME = re.compile(
    r"([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))"
)
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")
_UUID = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LOCAL = re.compile(rf'{_ATOM}(?:\.{_ATOM})*|"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*"')
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DOMAIN = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_LABEL_ASCII = re.compile(_LABEL)
_IPV6_CHARACTERS = re.compile(r"[0-9A-Fa-f:.]+")
_DURATION = re.compile(DURATION)
# RFC 3986: its unreserved characters and sub-delimiters, a percent-encoded byte, a path's
# character; the URI's authority (user, host, port), then its path, query and fragment.
_UNRESERVED = r"A-Za-z0-9\-._~"
_SUB_DELIMS = r"!$&'()*+,;="
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:@]|{_PCT})"
_URI = re.compile(
    rf"[A-Za-z][A-Za-z0-9+.\-]*:"
    rf"(?://(?:(?:[{_UNRESERVED}{_SUB_DELIMS}:]|{_PCT})*@)?"
    rf"(?P<host>\[[^\]/?#@]*\]|(?:[{_UNRESERVED}{_SUB_DELIMS}]|{_PCT})*)(?::[0-9]*)?"
    rf"(?:/{_PCHAR}*)*"
    rf"|/?(?:{_PCHAR}+(?:/{_PCHAR}*)*)?)"
    rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
)
_IPVFUTURE = re.compile(rf"v[0-9A-Fa-f]+\.[{_UNRESERVED}{_SUB_DELIMS}:]+")


def is_date(text: str) -> bool:
    match = _DATE.fullmatch(text)
    if not match:
        return False
    year, month, day = map(int, match.groups())
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    return 1 <= month <= 12 and 1 <= day <= days[month - 1]


def is_time(text: str) -> bool:
    match = _TIME.fullmatch(text)
    if not match:
        return False
    hour, minute, second = map(int, match.groups()[:3])
    sign, off_hour, off_minute = match[4], int(match[5] or 0), int(match[6] or 0)
    if hour > 23 or minute > 59 or second > 60 or off_hour > 23 or off_minute > 59:
        return False
    if second == 60:  # a leap second: 23:59:60 in UTC, whatever the offset
        offset = (off_hour * 60 + off_minute) * (-1 if sign == "-" else 1)
        return (hour * 60 + minute - offset) % 1440 == 23 * 60 + 59
    return True


def is_date_time(text: str) -> bool:
    date, sep, time = text[:10], text[10:11], text[11:]
    return sep in ("T", "t") and is_date(date) and is_time(time)


def is_email(text: str) -> bool:
    local, at, domain = text.rpartition("@")
    if not at or len(local) > 64 or not _LOCAL.fullmatch(local):
        return False
    if domain.startswith("[") and domain.endswith("]"):
        literal = domain[1:-1]
        if literal.startswith("IPv6:"):
            try:
                ipaddress.IPv6Address(literal[5:])
            except ValueError:
                return False
            return True
        return _IPV4.fullmatch(literal) is not None
    return len(domain) <= 253 and _DOMAIN.fullmatch(domain) is not None


def is_hostname(text: str) -> bool:
    """RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens, 1 to
    63 characters each, 253 in all; a label with `--` third and fourth is an IDNA A-label
    (`xn--`) that decodes under IDNA 2008's rules (the `idna` package)."""
    if not text or len(text) > 253:
        return False
    for label in text.split("."):
        if not _LABEL_ASCII.fullmatch(label):
            return False
        if label[2:4] == "--":
            if label[:4].lower() != "xn--":
                return False
            try:
                idna.decode(label)
            except (idna.IDNAError, UnicodeError):
                return False
    return True


def is_ipv6(text: str) -> bool:
    """RFC 4291's text forms (a dotted quad last allowed, no leading zero in it); no zone."""
    if not _IPV6_CHARACTERS.fullmatch(text):
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def is_uri(text: str) -> bool:
    """RFC 3986's URI (absolute: a scheme), character by character; a bracketed host is
    an IPv6 address or an IPvFuture."""
    match = _URI.fullmatch(text)
    if not match:
        return False
    host = match["host"]
    if host is not None and host.startswith("["):
        inner = host[1:-1]
        return is_ipv6(inner) or _IPVFUTURE.fullmatch(inner) is not None
    return True


STRICT_FORMATS = {
    "date": is_date,
    "time": is_time,
    "date-time": is_date_time,
    "email": is_email,
    "uuid": lambda text: _UUID.fullmatch(text) is not None,
    "ipv4": lambda text: _IPV4.fullmatch(text) is not None,
    "hostname": is_hostname,
    "ipv6": is_ipv6,
    "uri": is_uri,
    "duration": lambda text: _DURATION.fullmatch(text) is not None,
}


def format_checker(base: jsonschema.FormatChecker) -> jsonschema.FormatChecker:
    """`base` (a draft's format checker) with cdd's exact checks of the formats it writes;
    a value that is no string passes, as the standard says."""
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = dict(base.checkers)
    for name, check in STRICT_FORMATS.items():
        checker.checkers[name] = (_strings_only(check), ())
    return checker


def _strings_only(check):
    return lambda value: not isinstance(value, str) or check(value)
