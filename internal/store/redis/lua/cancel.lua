-- cancel.lua: give back n events booked for ARGV[3] (a stored time,
-- reservation bit clear) if that time has not come. ARGV[4] n, ARGV[5]
-- period ns. Reply: keys delta, now (s, ns).
local k = KEYS[1]
local total, other = pread('LLEN', k)
noteBefore(k, other or total > 0)
if other then
  drop(k)
elseif total > 0 and rel(ARGV[3]) > 0 then
  redis.call('LREM', k, -tonumber(ARGV[4]), flagged(ARGV[3]))
  expireExact(k, tonumber(ARGV[5]))
end
return {keysDelta(), nowS, nowN}
