"""The shared registry store: Redis, so several registry replicas can serve one registry.

Every check-then-write (ownership, caps, heartbeat, delete, sweep) is one Lua script,
which Redis runs atomically: two replicas cannot both claim a name. Scripts name keys
they compute, so this needs a standalone Redis (or a primary with replicas), not Cluster.

Keys, under a prefix:
    agent:NAME          hash: owner, expires_at, ttl, registered_at, record, terms
    names               sorted set of every name (score 0: ordered by name)
    expiry              sorted set of names scored by expires_at, for the sweep
    owner:OWNER         set of the names an identity holds
    idx:KIND:TERM       sorted set of names (score 0) per capability, skill id or tag,
                        and per word of the searchable text (kind ``word``)
    schema              the keys' version, SCHEMA once every agent's words are indexed

Free text uses the ``idx:word:WORD`` sets (the same words the SQLite store's FTS5 index
holds): a query walks the smallest of the sets it names in name order and checks each
name against the others, inside one script per page. RediSearch is not used, even where
the server has it: its tokenizer, stemming and stop words would answer differently from
the SQLite store, and these sets need nothing beyond Redis itself.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from butler.registry.model import AgentEntry, query_tokens, text_words
from butler.registry.store import AgentNotFound, NameOwned, Query, QuotaExceeded
from internal.protocol.a2a.model import Unavailable

log = logging.getLogger("butler.registry")

DEFAULT_PREFIX = "butler:registry:"
SCHEMA = "2"  # 2: the word sets of free text
_SCAN_BUDGET = 2000  # names one page script may walk: a few ms of Redis's time
_SCAN_BATCH = 200
_SWEEP_BATCH = 500
_FIELDS = ("owner", "expires_at", "ttl", "registered_at", "record")

# One page of a query in one round trip: names in name order from the smallest of the
# sets every name must be in (KEYS), each checked against the others and read with its
# fields. It stops at ARGV[3] rows or after ARGV[4] names, and returns the name to go on
# after ('' once the walk is done) and the rows.
_PAGE = """
local driver, smallest = 1, nil
for i, k in ipairs(KEYS) do
  local n = redis.call('ZCARD', k)
  if smallest == nil or n < smallest then driver, smallest = i, n end
end
local p, start, want, budget = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local chunk = want
if #KEYS > 1 then chunk = 256 end
local rows, scanned = {}, 0
while scanned < budget do
  local names = redis.call('ZRANGEBYLEX', KEYS[driver], start, '+', 'LIMIT', 0, chunk)
  for _, name in ipairs(names) do
    scanned = scanned + 1
    local ok = true
    for i, k in ipairs(KEYS) do
      if i ~= driver and not redis.call('ZSCORE', k, name) then ok = false break end
    end
    if ok then
      rows[#rows + 1] = {name, unpack(redis.call('HMGET', p .. 'agent:' .. name,
                         'owner', 'expires_at', 'ttl', 'registered_at', 'record'))}
      if #rows >= want then return {name, rows} end
    end
  end
  if #names < chunk then return {'', rows} end
  start = '(' .. names[#names]
end
return {string.sub(start, 2), rows}
"""

_REMOVE = """
local function remove(p, name)
  local key = p .. 'agent:' .. name
  local cur = redis.call('HMGET', key, 'owner', 'terms')
  if cur[2] then
    for _, k in ipairs(cjson.decode(cur[2])) do redis.call('ZREM', k, name) end
  end
  if cur[1] then redis.call('SREM', p .. 'owner:' .. cur[1], name) end
  redis.call('ZREM', p .. 'names', name)
  redis.call('ZREM', p .. 'expiry', name)
  redis.call('DEL', key)
end
"""

_UPSERT = _REMOVE + """
local p, name, owner = ARGV[1], ARGV[2], ARGV[3]
local now, max_names = tonumber(ARGV[4]), tonumber(ARGV[5])
local key = p .. 'agent:' .. name
local cur = redis.call('HMGET', key, 'owner', 'expires_at', 'registered_at')
local live = cur[1] and tonumber(cur[2]) > now
if live and cur[1] ~= owner then return {'owned'} end
local registered_at = ARGV[4]
if live then
  registered_at = cur[3]
else
  local held = 0
  for _, n in ipairs(redis.call('SMEMBERS', p .. 'owner:' .. owner)) do
    local e = redis.call('HMGET', p .. 'agent:' .. n, 'owner', 'expires_at')
    if e[1] == owner and tonumber(e[2]) > now then held = held + 1 end
  end
  if held >= max_names then return {'quota'} end
end
remove(p, name)
local terms = ARGV[9]
for _, k in ipairs(cjson.decode(terms)) do redis.call('ZADD', k, 0, name) end
redis.call('HSET', key, 'owner', owner, 'expires_at', ARGV[7], 'ttl', ARGV[8],
           'registered_at', registered_at, 'record', ARGV[6], 'terms', terms)
redis.call('ZADD', p .. 'names', 0, name)
redis.call('ZADD', p .. 'expiry', ARGV[7], name)
redis.call('SADD', p .. 'owner:' .. owner, name)
if live then return {'updated', registered_at} end
return {'created', registered_at}
"""

_HEARTBEAT = """
local p, name, owner, now = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local key = p .. 'agent:' .. name
local cur = redis.call('HMGET', key, 'owner', 'expires_at')
if not cur[1] or tonumber(cur[2]) <= now then return {'missing'} end
if cur[1] ~= owner then return {'owned'} end
redis.call('HSET', key, 'expires_at', ARGV[5], 'ttl', ARGV[6])
redis.call('ZADD', p .. 'expiry', ARGV[5], name)
return {'ok'}
"""

_DELETE = _REMOVE + """
local p, name, owner, now = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local cur = redis.call('HMGET', p .. 'agent:' .. name, 'owner', 'expires_at')
if not cur[1] or tonumber(cur[2]) <= now then return 'missing' end
if cur[1] ~= owner and ARGV[5] ~= '1' then return 'owned' end
remove(p, name)
return 'ok'
"""

# Schema 1 had no word sets: an agent's words are added unless its record changed
# meanwhile (then the write that changed it indexed it).
_INDEX_WORDS = """
local cur = redis.call('HMGET', KEYS[1], 'record', 'terms')
if cur[1] ~= ARGV[2] then return 0 end
for _, k in ipairs(cjson.decode(cur[2])) do redis.call('ZREM', k, ARGV[1]) end
for _, k in ipairs(cjson.decode(ARGV[3])) do redis.call('ZADD', k, 0, ARGV[1]) end
redis.call('HSET', KEYS[1], 'terms', ARGV[3])
return 1
"""

_SWEEP = _REMOVE + """
local p, now = ARGV[1], tonumber(ARGV[2])
local names = redis.call('ZRANGEBYSCORE', p .. 'expiry', '-inf', ARGV[2], 'LIMIT', 0, ARGV[3])
local removed = 0
for _, name in ipairs(names) do
  local e = redis.call('HGET', p .. 'agent:' .. name, 'expires_at')
  if not e or tonumber(e) <= now then
    remove(p, name)
    removed = removed + 1
  end
end
return {removed, #names}
"""


class RedisStore:
    def __init__(self, client: Any, prefix: str = DEFAULT_PREFIX) -> None:
        self._r = client
        self._p = prefix
        self._closed = False
        self._upsert = client.register_script(_UPSERT)
        self._heartbeat = client.register_script(_HEARTBEAT)
        self._delete = client.register_script(_DELETE)
        self._sweep = client.register_script(_SWEEP)
        self._page = client.register_script(_PAGE)
        self._index_words = client.register_script(_INDEX_WORDS)

    @classmethod
    async def open(cls, url: str, *, prefix: str = DEFAULT_PREFIX) -> RedisStore:
        # Imported here so the daemon and the SQLite registry run without the redis package.
        try:
            import redis.asyncio
        except ImportError:
            raise RuntimeError(
                "a redis:// store needs the redis package: pip install 'butler-a2a[redis]'"
            ) from None

        client = redis.asyncio.from_url(url, decode_responses=True)
        try:
            await client.ping()
        except BaseException:
            await client.aclose()
            raise
        store = cls(client, prefix)
        try:
            await store._upgrade()
        except BaseException:
            await client.aclose()
            raise
        return store

    async def _upgrade(self) -> None:
        """Brings the keys to SCHEMA: a store written before the word sets gets them once,
        a batch of names at a time (other replicas may keep writing meanwhile)."""
        version_key = f"{self._p}schema"
        if await self._r.get(version_key) == SCHEMA:
            return
        start = "-"
        while names := await self._r.zrangebylex(f"{self._p}names", start, "+", 0, 500):
            pipe = self._r.pipeline(transaction=False)
            for name in names:
                pipe.hget(f"{self._p}agent:{name}", "record")
            for name, record in zip(names, await pipe.execute(), strict=True):
                if record is not None:
                    keys = self._term_keys(AgentEntry.from_record(record))
                    await self._index_words(keys=[f"{self._p}agent:{name}"],
                                            args=[name, record, json.dumps(keys)])
            start = f"({names[-1]}"
        await self._r.set(version_key, SCHEMA)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._r.aclose()

    def _term_keys(self, entry: AgentEntry) -> list[str]:
        keys = [self._idx("capability", t) for t in entry.capabilities]
        keys += [self._idx("skill", t) for t in entry.skills]
        keys += [self._idx("word", t) for t in sorted(text_words(entry.search_text))]
        return keys + [self._idx("tag", t) for t in entry.tags]

    def _idx(self, kind: str, term: str) -> str:
        return f"{self._p}idx:{kind}:{term}"

    async def upsert(
        self, entry: AgentEntry, *, now: float, max_names: int
    ) -> tuple[AgentEntry, bool]:
        with _store_errors():
            result = await self._upsert(args=[
                self._p, entry.name, entry.owner, repr(now), max_names, entry.to_record(),
                repr(entry.expires_at), entry.ttl_seconds, json.dumps(self._term_keys(entry)),
            ])
            if result[0] == "owned":
                raise NameOwned(entry.name)
            if result[0] == "quota":
                raise QuotaExceeded(max_names)
            return replace(entry, registered_at=float(result[1])), result[0] == "created"

    async def heartbeat(
        self, name: str, owner: str, *, now: float, ttl_seconds: int
    ) -> AgentEntry:
        with _store_errors():
            result = await self._heartbeat(args=[
                self._p, name, owner, repr(now), repr(now + ttl_seconds), ttl_seconds,
            ])
            if result[0] == "owned":
                raise NameOwned(name)
            entry = await self.get(name, now=now) if result[0] == "ok" else None
            if entry is None:
                raise AgentNotFound(name)
            return entry

    async def delete(self, name: str, owner: str, *, now: float, force: bool = False) -> None:
        with _store_errors():
            flag = "1" if force else "0"
            result = await self._delete(args=[self._p, name, owner, repr(now), flag])
            if result == "owned":
                raise NameOwned(name)
            if result == "missing":
                raise AgentNotFound(name)

    async def get(self, name: str, *, now: float) -> AgentEntry | None:
        with _store_errors():
            fields = await self._r.hmget(f"{self._p}agent:{name}", _FIELDS)
            return _entry(fields, now)

    async def query(
        self, query: Query, *, now: float, limit: int, after: str | None = None
    ) -> tuple[list[AgentEntry], str | None]:
        with _store_errors():
            keys = [self._idx(k, t) for k, t in (
                ("capability", query.capability), ("skill", query.skill), ("tag", query.tag)
            ) if t is not None]
            keys += [self._idx("word", t) for t in query_tokens(query.words)]
            start = f"({after}" if after else "-"
            # A word with no letter or digit has no set: the rows are filtered here, so
            # ask for them in scan batches rather than a page at a time.
            floor = _SCAN_BATCH if any(not query_tokens((w,)) for w in query.words) else 0
            found: list[AgentEntry] = []
            while len(found) <= limit:
                go_on, rows = await self._page(
                    keys=keys or [f"{self._p}names"],
                    args=[self._p, start, max(limit + 1 - len(found), floor), _SCAN_BUDGET])
                for row in rows:
                    # Expiry, and each query word as a substring, are checked here.
                    entry = _entry(row[1:], now)
                    if entry is not None and entry.matches(
                        capability=query.capability, skill=query.skill, tag=query.tag,
                        words=query.words,
                    ):
                        found.append(entry)
                if not go_on:
                    break
                start = f"({go_on}"
            if len(found) > limit:
                return found[:limit], found[limit - 1].name
            return found, None

    async def ping(self) -> None:
        with _store_errors():
            await self._r.ping()

    async def count_live(self, *, now: float) -> int:
        with _store_errors():
            return int(await self._r.zcount(f"{self._p}expiry", f"({now!r}", "+inf"))

    async def sweep(self, *, now: float) -> int:
        with _store_errors():
            removed = 0
            while True:
                done, seen = await self._sweep(args=[self._p, repr(now), _SWEEP_BATCH])
                removed += int(done)
                if int(seen) < _SWEEP_BATCH or int(done) == 0:
                    return removed


@contextmanager
def _store_errors() -> Iterator[None]:
    from redis import exceptions

    try:
        yield
    except (exceptions.ConnectionError, exceptions.TimeoutError) as exc:
        log.warning("registry store: %s", exc)
        raise Unavailable("overloaded", "registry store unreachable", retry_after=2) from exc


def _entry(fields: list[str | None], now: float) -> AgentEntry | None:
    owner, expires_at, ttl, registered_at, record = fields
    if owner is None or expires_at is None or record is None or float(expires_at) <= now:
        return None
    return AgentEntry.from_record(
        record, owner=owner, expires_at=float(expires_at),
        ttl_seconds=int(ttl or 0), registered_at=float(registered_at or 0),
    )
