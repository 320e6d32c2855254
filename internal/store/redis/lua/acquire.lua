-- acquire.lua: take one slot of a lease key if fewer than ARGV[3] are held
-- (0: no cap), for ARGV[4] microseconds, as member ARGV[5].
-- Reply: code (1 taken, 0 full, 2 member taken: pick another id), held,
-- keys delta, now (s, ns).
local k = KEYS[1]
local cap, ttl, member = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local held = leases(k)
local code = 0
if cap <= 0 or held < cap then
  if redis.call('ZADD', k, 'NX', fmtUs(nowUs + ttl), member) == 1 then
    code, held = 1, held + 1
    setLive(k, true)
    expireLeases(k)
  else
    code = 2
  end
end
return {code, held, keysDelta(), nowS, nowN}
