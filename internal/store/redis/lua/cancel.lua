-- cancel.lua: give back n events booked for ARGV[3] (Unix ns, reservation
-- bit clear) if that time has not come. ARGV[4] n, ARGV[5] period ns.
-- Reply: keys delta, now (s, ns).
local k = KEYS[1]
local kd = kind(k, 'list')
local seen = {[k] = kd ~= 'none'}
if kd == 'other' then redis.call('DEL', k) end
if kd == 'same' and rel(ARGV[3]) > 0 then
  redis.call('LREM', k, -tonumber(ARGV[4]), flagged(ARGV[3]))
  expireExact(k, tonumber(ARGV[5]))
end
return {keysDelta(seen), nowS, nowN}
