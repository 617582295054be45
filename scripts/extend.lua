-- extend.lua resets the TTL of an acquisition's lock keys, only when every
-- one of them still holds the lock's value; otherwise it changes nothing. It never
-- re-creates a missing key: a key that expired may already belong to someone
-- else on the other nodes. It never shortens a TTL either: extensions with
-- different TTLs (Extend with WithTTL, beside auto-extension) may reach a
-- node in any order, and each one's validity counts on the node keeping the
-- key at least that long. An owner lock's other acquisitions count on it
-- too.
--
-- KEYS[1..n]: the lock keys.
-- ARGV[1]: the value of the attempt that won the lock.
-- ARGV[2]: the owner of a reentrant lock, or '' for a plain lock.
-- ARGV[3]: the new TTL in milliseconds.
--
-- Returns 1 when the TTLs were reset, else 0.
local token, owner, ttl = ARGV[1], ARGV[2], ARGV[3]
for i = 1, #KEYS do
  if not holds(KEYS[i], token, owner) then
    return 0
  end
end
for i = 1, #KEYS do
  expireAtLeast(KEYS[i], ttl)
end
return 1
