-- lease.lua: a lease key is a sorted set: member "id@owner", score its
-- expiry in Unix microseconds. The key lives as long as its longest lease.

local function fmtUs(x) return string.format('%d', x) end

-- leases returns how many leases k holds after dropping the expired ones
-- (and state of another kind).
local function leases(k)
  local held, other = pread('ZCARD', k)
  noteBefore(k, other or held > 0)
  if other then
    drop(k)
    return 0
  end
  if held > 0 then
    held = held - redis.call('ZREMRANGEBYSCORE', k, '-inf', fmtUs(nowUs))
    if held == 0 then setLive(k, false) end
  end
  return held
end

local function expireLeases(k)
  local top = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
  if top[2] then expireIn(k, (tonumber(top[2]) - nowUs) * 1000) end
end
