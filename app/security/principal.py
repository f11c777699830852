"""Principals as Kafka names them: `User:<name>` (KafkaPrincipal), and who is a super user."""

from __future__ import annotations

from typing import Any, Final

USER: Final = "User"
ANONYMOUS: Final = "User:ANONYMOUS"  # PLAINTEXT, and SSL without a client certificate

# The attribute names of RFC 2253 (what Java's X500Principal.getName() prints)
_RDN_NAMES: Final = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def user(name: str) -> str:
    return f"{USER}:{name}"


def _escape_rdn_value(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def certificate_principal(peercert: dict[str, Any]) -> str:
    """Kafka's default SSL principal: `User:` + the subject in RFC 2253 form, most specific
    attribute first ("CN=alice,OU=eng,O=Example"), as `X500Principal.getName()` prints it."""
    subject = peercert.get("subject") or ()
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_RDN_NAMES.get(k, k)}={_escape_rdn_value(str(v))}" for k, v in rdn))
    return user(",".join(rdns)) if rdns else ANONYMOUS


def parse_super_users(value: str) -> frozenset[str]:
    """COORD_SUPER_USERS as Kafka's super.users: `User:admin;User:ops`."""
    out = set()
    for item in value.split(";"):
        item = item.strip()
        if not item:
            continue
        kind, sep, name = item.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"COORD_SUPER_USERS entry {item!r} is not Type:name (User:admin)")
        out.add(item)
    return frozenset(out)
