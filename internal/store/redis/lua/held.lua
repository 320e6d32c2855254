-- held.lua: the number of live leases on a key. Reply: held, 0, now (s, ns).
local held = pread('ZCOUNT', KEYS[1], '(' .. fmtUs(nowUs), '+inf') or 0
return {held, 0, nowS, nowN}
