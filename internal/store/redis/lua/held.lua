-- held.lua: the number of live leases on a key. Reply: held, 0, now.
local k = KEYS[1]
local held = 0
if kind(k, 'zset') == 'same' then
  held = redis.call('ZCOUNT', k, '(' .. fmtUs(nowUs), '+inf')
end
return {held, 0, nowS, nowN}
