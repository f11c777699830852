"""SASL on the server side: PLAIN and SCRAM-SHA-256/512 (KIP-43, KIP-84; RFC 5802, 7677).

The SCRAM exchange is `scramp`'s; this module keeps what Kafka adds around it: the stored
credential (salt, iterations, stored key, server key; never the password), the iteration
bounds, the mechanism codes of the wire, and PLAIN checked against the same stored keys.
Every step is synchronous and may hash (PLAIN runs PBKDF2): callers run it off the event loop.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from typing import Final

from scramp import ScramException, ScramMechanism

from app.security.principal import user

# stored as it is (storage/security.py); its importers find it here too
from storage.security import ScramCredential as ScramCredential

# Kafka's ScramMechanism type codes (DescribeUserScramCredentials, AlterUserScramCredentials)
SCRAM_MECHANISMS: Final = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES: Final = {code: name for name, code in SCRAM_MECHANISMS.items()}
PLAIN: Final = "PLAIN"
# Kafka's bounds (ScramMechanism.minIterations/maxIterations): fewer is weak, more lets a
# credential change make every later login cost seconds of CPU
MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 16384
_HASHES: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# one message for every way authentication fails: which part was wrong is not told
FAILED: Final = "Authentication failed: invalid credentials"
MAX_TOKEN_BYTES: Final = 16 * 1024  # no PLAIN or SCRAM message comes near it


class AuthenticationFailed(Exception):
    """SASL_AUTHENTICATION_FAILED with this message; the connection is then closed."""


class CredentialRejected(ValueError):
    """UNACCEPTABLE_CREDENTIAL: a credential the store refuses (iterations out of bounds)."""


def parse_mechanisms(value: str) -> tuple[str, ...]:
    out = tuple(m.strip().upper() for m in value.split(",") if m.strip())
    for m in out:
        if m != PLAIN and m not in SCRAM_MECHANISMS:
            raise ValueError(
                f"COORD_SASL_ENABLED_MECHANISMS: {m} is not one of PLAIN, "
                + ", ".join(SCRAM_MECHANISMS)
            )
    return out


def check_iterations(mechanism: str, iterations: int) -> None:
    if mechanism not in SCRAM_MECHANISMS:
        raise CredentialRejected(f"unknown SCRAM mechanism {mechanism!r}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise CredentialRejected(
            f"{mechanism} iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, "
            f"not {iterations}"
        )


def check_user_name(name: str) -> None:
    if not name or len(name) > 1024 or any(ord(c) < 32 for c in name):
        raise CredentialRejected("a user name is 1 to 1024 printable characters")


def make_credential(
    name: str, mechanism: str, password: str, iterations: int = MIN_ITERATIONS
) -> ScramCredential:
    """A new credential from a password (a fresh random salt). Runs PBKDF2: off the loop."""
    check_user_name(name)
    check_iterations(mechanism, iterations)
    if not password:
        raise CredentialRejected("the password is empty")
    salt, stored_key, server_key, i = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations
    )
    return ScramCredential(name, mechanism, salt, i, stored_key, server_key)


def credential_from_salted_password(
    name: str, mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """What AlterUserScramCredentials carries (the client salted the password, as Kafka's
    AdminClient does): the stored and server keys of RFC 5802, section 3."""
    check_user_name(name)
    check_iterations(mechanism, iterations)
    if not salt or not salted_password:
        raise CredentialRejected("the salt and salted password must not be empty")
    hf = _HASHES[mechanism]
    client_key = hmac.digest(salted_password, b"Client Key", hf)
    stored_key = hashlib.new(hf, client_key).digest()
    server_key = hmac.digest(salted_password, b"Server Key", hf)
    return ScramCredential(name, mechanism, salt, iterations, stored_key, server_key)


def verify_password(credential: ScramCredential, password: str) -> bool:
    """Whether `password` is the one the credential was made from. Runs PBKDF2: off the loop."""
    try:
        _, stored_key, _, _ = ScramMechanism(credential.mechanism).make_auth_info(
            password, iteration_count=credential.iterations, salt=credential.salt
        )
    except ScramException:
        return False
    return hmac.compare_digest(stored_key, credential.stored_key)


# (user name, mechanism) -> the stored credential, or None
CredentialLookup = Callable[[str, str], "ScramCredential | None"]


_UNKNOWN_USER: list[ScramCredential] = []  # made on first use: a salt and keys of no password


def _unknown_user() -> ScramCredential:
    if not _UNKNOWN_USER:
        salt, stored, server, i = ScramMechanism("SCRAM-SHA-512").make_auth_info(
            secrets.token_urlsafe(32), iteration_count=MIN_ITERATIONS
        )
        _UNKNOWN_USER.append(ScramCredential("", "SCRAM-SHA-512", salt, i, stored, server))
    return _UNKNOWN_USER[0]


def verify_any(lookup: CredentialLookup, name: str, password: str) -> bool:
    """PLAIN (and HTTP Basic): the password against any SCRAM credential the user has. An
    unknown user's password is hashed all the same (against keys no password makes), so the
    time of the answer does not tell which user names exist."""
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        credential = lookup(name, mechanism)
        if credential is not None:
            return verify_password(credential, password)
    verify_password(_unknown_user(), password)
    return False


class SaslServer:
    """One connection's authentication. `step(token)` returns (reply token, principal once
    authenticated, else None) or raises AuthenticationFailed; each step runs off the loop."""

    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._scram = None
        self._steps = 0
        self.user: str | None = None
        if mechanism in SCRAM_MECHANISMS:
            self._scram = ScramMechanism(mechanism).make_server(self._auth_info)

    def _auth_info(self, name: str) -> tuple[bytes, bytes, bytes, int]:
        self.user = name  # who tried, for the audit line; the principal only once verified
        credential = self._lookup(name, self.mechanism)
        if credential is None:
            raise ScramException(FAILED)
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def checks_password(self, token: bytes) -> str | None:
        """The user whose password (or proof of it) `token` carries, so a failed-login delay
        can be waited out before it is checked; None for a step that checks none."""
        if self._scram is not None:
            return self.user if self._steps == 1 else None
        parts = token.split(b"\x00")
        if self._steps or len(parts) != 3 or not parts[1]:
            return None
        return parts[1].decode("utf-8", "replace")

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        self._steps += 1
        if len(token) > MAX_TOKEN_BYTES:
            raise AuthenticationFailed(f"a SASL token of {len(token)} bytes is too large")
        if self._scram is None:
            return b"", self._plain(token)
        try:
            message = token.decode("utf-8")
            if self._steps == 1:
                self._scram.set_client_first(message)
                return self._scram.get_server_first().encode(), None
            if self._steps == 2:
                self._scram.set_client_final(message)
                assert self.user is not None
                return self._scram.get_server_final().encode(), user(self.user)
        except (ScramException, UnicodeDecodeError, ValueError, TypeError) as e:
            raise AuthenticationFailed(
                f"{FAILED} with SASL mechanism {self.mechanism} ({e})"
            ) from e
        raise AuthenticationFailed("the SCRAM exchange is already complete")

    def _plain(self, token: bytes) -> str:
        parts = token.split(b"\x00")
        if self._steps != 1 or len(parts) != 3:
            raise AuthenticationFailed("a PLAIN message is authzid NUL username NUL password")
        try:
            authzid, name, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError as e:
            raise AuthenticationFailed("a PLAIN message is UTF-8") from e
        if authzid and authzid != name:
            # Kafka: an authorization id other than the user name is refused
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        if not name:
            raise AuthenticationFailed(f"{FAILED} with SASL mechanism PLAIN")
        self.user = name  # who tried, for the audit line
        if not verify_any(self._lookup, name, password):
            raise AuthenticationFailed(f"{FAILED} with SASL mechanism PLAIN")
        return user(name)
