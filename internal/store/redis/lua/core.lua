-- core.lua: the prelude of every sluice script. It reads the time and
-- defines the helpers shared by all; the algorithm modules a script needs
-- and its body follow it.
--
-- ARGV[1] and ARGV[2] are now as Unix seconds and nanoseconds, or ARGV[1] is
-- empty and Redis TIME is used, so that every host sharing the server agrees.
--
-- Lua numbers are doubles: integers are exact only below 2^53, which Unix
-- nanoseconds exceed. Times are therefore kept in Redis as decimal strings of
-- Unix nanoseconds and handled here as nanoseconds relative to now (exact
-- within 104 days of now); lease expiries are sorted-set scores in Unix
-- microseconds (exact until the year 2255).
local nowS, nowN
if ARGV[1] == '' then
  local t = redis.call('TIME')
  nowS = tonumber(t[1])
  nowN = tonumber(t[2]) * 1000
else
  nowS = tonumber(ARGV[1])
  nowN = tonumber(ARGV[2])
end
local nowUs = nowS * 1000000 + math.floor(nowN / 1000)
local NEVER = -1
local MAXINT = 9.2e18
local MAXEXACT = 1000000
local ALGO = {} -- the rate algorithms included, by letter: a, e, s

-- rel turns a stored time into nanoseconds relative to now.
local function rel(s)
  local l = #s
  if l > 9 then
    return (tonumber(string.sub(s, 1, l - 9)) - nowS) * 1e9 + (tonumber(string.sub(s, l - 8)) - nowN)
  end
  return -nowS * 1e9 + (tonumber(s) - nowN)
end

-- abs turns nanoseconds relative to now into a stored time.
local function abs(r)
  local t = nowN + r
  local q = math.floor(t / 1e9)
  local ns = t - q * 1e9
  if ns < 0 then
    q, ns = q - 1, ns + 1e9
  elseif ns >= 1e9 then
    q, ns = q + 1, ns - 1e9
  end
  return string.format('%d%09d', nowS + q, ns)
end

local function int(x)
  if x > MAXINT then return MAXINT end
  if x < -MAXINT then return -MAXINT end
  return x
end

local function ceilDiv(a, b)
  if a <= 0 then return 0 end
  return math.ceil(a / b)
end

-- Keys seen and whether they exist, for the store's count of keys (Len):
-- BEFORE[k] when the script first read k, LIVE[k] after its last write.
local BEFORE, LIVE = {}, {}
local function noteBefore(k, exists)
  if BEFORE[k] == nil then BEFORE[k] = exists end
end
local function setLive(k, exists) LIVE[k] = exists end
local function keysDelta()
  local d = 0
  for k, was in pairs(BEFORE) do
    local is = LIVE[k]
    if is == nil then is = was end
    if is and not was then d = d + 1 elseif was and not is then d = d - 1 end
  end
  return d
end

-- pread runs a read command on key k. A key holding state of another kind
-- (WRONGTYPE) reads as nothing, with other = true: the writing scripts drop
-- it, as store/memory drops an entry of another kind or algorithm.
local function pread(cmd, k, ...)
  local r = redis.pcall(cmd, k, ...)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'WRONGTYPE', 1, true) then return nil, true end
    return error(r)
  end
  return r, false
end

local function drop(k)
  redis.call('DEL', k)
  setLive(k, false)
end

-- expireIn keeps k for ns more nanoseconds, or drops it now.
local function expireIn(k, ns)
  if ns <= 0 then
    drop(k)
  else
    redis.call('PEXPIRE', k, string.format('%d', math.ceil(ns / 1e6)))
  end
end
