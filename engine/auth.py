"""Tenants, API keys and permissions.

A key looks like ``bt_<prefix>_<secret>``: the prefix (public, indexed) finds the row, the SHA-256
of the whole key is compared in constant time. Keys carry 192 random bits, so a fast hash is enough:
there is nothing to brute-force that a slow hash would protect.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from sqlalchemy import bindparam, select

from engine.store.db import iso, utcnow
from engine.errors import ConflictError, ForbiddenError, InvalidParamsError, NotFoundError, UnauthorizedError
from engine.store.models import ApiKey, Tenant
from engine.store.paging import page_of
from engine.store.unit_of_work import Actor, UnitOfWork

ADMIN = "admin"
# Method groups that need ``admin``: a key granted ``definition.*`` would be granted nothing.
ADMIN_GROUPS = ("definition", "apikey", "webhook", "channel", "delivery")
_PERMISSION = re.compile(r"^(\*|admin|[a-z_]+\.(\*|[a-z_]+))$")
_KEY = re.compile(r"^bt_([A-Za-z0-9]{12})_([A-Za-z0-9_-]{32})$")
# Compared against when no row matches, so an unknown prefix costs the same time as a wrong secret.
_DUMMY_HASH = hashlib.sha256(b"baton-no-such-key").hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who is calling: a tenant, through one key, with its permissions."""

    tenant_id: int
    key_id: int
    permissions: tuple[str, ...]
    name: str = ""
    user: str | None = None  # the operator the key stands for (apikey.create {user, groups})
    groups: tuple[str, ...] = ()

    @property
    def actor(self) -> Actor:
        """Who a unit of work acts for when this key calls."""
        return Actor("api_key", self.name)

    def allows(self, permission: str) -> bool:
        return any(_grants(granted, permission) for granted in self.permissions)

    def require(self, permission: str) -> None:
        if not self.allows(permission):
            raise ForbiddenError(permission)

    def holds(self, permission: str) -> bool:
        """Whether this key may grant ``permission`` to a new key: only what it holds itself, so a
        key never makes a stronger one (``*`` only from ``*``, ``process.*`` only from ``*`` or
        ``process.*``, ``admin`` or a method from a key allowed it)."""
        if permission == "*" or permission.endswith(".*"):
            return "*" in self.permissions or permission in self.permissions
        return self.allows(permission)


def _grants(granted: str, wanted: str) -> bool:
    if granted == "*" or granted == wanted:
        return True
    if granted.endswith(".*") and wanted != ADMIN:
        return wanted.startswith(granted[:-1])
    return False


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


# Columns, not an ORM entity: read on every request, and the entity's loading cost more than the query.
_BY_PREFIX = select(ApiKey.id, ApiKey.tenant_id, ApiKey.name, ApiKey.key_hash, ApiKey.revoked_at,
                    ApiKey.permissions, ApiKey.user, ApiKey.groups).where(
    ApiKey.prefix == bindparam("prefix"))


def authenticate(uow: UnitOfWork, raw_key: str | None) -> Principal:
    """The principal of an ``X-API-Key`` value; UnauthorizedError when missing, unknown or revoked."""
    match = _KEY.match(raw_key or "")
    if not match:
        raise UnauthorizedError("A valid API key is required in the X-API-Key header.")
    row = uow.run(_BY_PREFIX, {"prefix": match.group(1)}).first()
    expected = row.key_hash if row is not None else _DUMMY_HASH
    if not hmac.compare_digest(expected, _hash(raw_key)) or row is None or row.revoked_at is not None:
        raise UnauthorizedError("A valid API key is required in the X-API-Key header.")
    return Principal(tenant_id=row.tenant_id, key_id=row.id, permissions=tuple(row.permissions), name=row.name,
                     user=row.user, groups=tuple(row.groups or ()))


def validate_permissions(permissions: object) -> list[str]:
    if not isinstance(permissions, list) or not permissions:
        raise InvalidParamsError("Parameter 'permissions' must be a non-empty list of strings.")
    for permission in permissions:
        if not isinstance(permission, str) or not _PERMISSION.match(permission):
            raise InvalidParamsError(
                f"Parameter 'permissions' has an invalid entry {permission!r}: use a method name "
                "like 'process.start', a wildcard like 'process.*', 'admin' or '*'.")
        if permission.split(".")[0] in ADMIN_GROUPS:
            raise InvalidParamsError(
                f"Parameter 'permissions' has {permission!r}, which grants nothing: administration "
                "methods need the permission 'admin'.")
    return list(dict.fromkeys(permissions))


MAX_NAME = 200  # a user or group name
MAX_GROUPS = 50


def validate_operator(user: object, groups: object) -> tuple[str | None, list[str] | None]:
    """The ``user`` and ``groups`` a key may carry: a name of 1 to 200 characters (no comma: names
    are listed with commas in models) and a list of at most 50 such names; InvalidParamsError naming it."""
    if user is not None:
        _check_name(user, "user")
    if groups is not None:
        if not isinstance(groups, list) or len(groups) > MAX_GROUPS:
            raise InvalidParamsError(f"Parameter 'groups' must be a list of at most {MAX_GROUPS} group names.",
                                     data={"param": "groups"})
        for index, group in enumerate(groups):
            _check_name(group, f"groups[{index}]")
        groups = list(dict.fromkeys(group.strip() for group in groups)) or None
    return (user.strip() if user is not None else None), groups


def _check_name(value: object, param: str) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME or "," in value \
            or any(ord(char) < 32 for char in value):
        raise InvalidParamsError(f"Parameter '{param}' must be a name of 1 to {MAX_NAME} characters, without "
                                 "commas or control characters.", data={"param": param})


def create_key(uow: UnitOfWork, tenant_id: int, name: str, permissions: list[str],
               granted_by: Principal | None = None, *, user: str | None = None,
               groups: list[str] | None = None) -> tuple[ApiKey, str]:
    """Add a key to the session; returns the row and the key in clear (shown once, never stored).
    ``granted_by``: the key creating it (None from the command line), which may grant only the
    permissions it holds (ForbiddenError naming the first it does not). ``user`` and ``groups``:
    the operator it stands for (``validate_operator``)."""
    permissions = validate_permissions(permissions)
    user, groups = validate_operator(user, groups)
    if granted_by is not None:
        for permission in permissions:
            if not granted_by.holds(permission):
                raise ForbiddenError(permission, f"A key may grant only permissions it holds; this one does "
                                                 f"not hold '{permission}'.")
    prefix = secrets.token_hex(6)
    raw = f"bt_{prefix}_{secrets.token_urlsafe(24)}"
    row = ApiKey(tenant_id=tenant_id, name=name, prefix=prefix, key_hash=_hash(raw),
                 permissions=permissions, user=user, groups=groups)
    uow.session.add(row)
    uow.session.flush()
    return row, raw


def create_tenant(uow: UnitOfWork, name: str) -> tuple[Tenant, str]:
    """A new tenant and its first admin key (permission ``*``), in the unit of work."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise InvalidParamsError("The tenant name must be 1 to 100 characters.")
    if uow.execute(select(Tenant.id).where(Tenant.name == name)).first():
        raise ConflictError(f"A tenant named '{name}' already exists.")
    tenant = Tenant(name=name)
    uow.session.add(tenant)
    uow.session.flush()
    _, raw = create_key(uow, tenant.id, "admin", ["*"])
    return tenant, raw


def list_keys(uow: UnitOfWork, tenant_id: int, *, page: int, per_page: int) -> dict:
    return page_of(uow, select(ApiKey).where(ApiKey.tenant_id == tenant_id), ApiKey.id, page=page, per_page=per_page,
                   scalars=True, item=lambda r: {
                       "key_id": r.id, "name": r.name, "prefix": r.prefix, "permissions": r.permissions,
                       "user": r.user, "groups": r.groups or [],
                       "created_at": iso(r.created_at), "revoked_at": iso(r.revoked_at)})


def revoke_key(uow: UnitOfWork, tenant_id: int, key_id: int) -> dict:
    row = uow.execute(
        select(ApiKey).where(ApiKey.tenant_id == tenant_id, ApiKey.id == key_id)).scalar_one_or_none()
    if row is None:
        raise NotFoundError(f"API key {key_id} not found.")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
    return {"key_id": row.id, "revoked": True}


def describe(uow: UnitOfWork, principal: Principal) -> dict:
    """The calling key as it may see itself: its tenant, name, prefix, permissions and the operator it
    stands for (no secret)."""
    key = uow.execute(select(ApiKey.name, ApiKey.prefix, Tenant.name.label("tenant")).join(
        Tenant, Tenant.id == ApiKey.tenant_id).where(ApiKey.id == principal.key_id,
                                                     ApiKey.tenant_id == principal.tenant_id)).one()
    return {"tenant": key.tenant, "key_id": principal.key_id, "name": key.name, "prefix": key.prefix,
            "permissions": list(principal.permissions), "user": principal.user, "groups": list(principal.groups)}
