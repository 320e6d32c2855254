-- renew.lua: extend this owner's live leases ARGV[4..] to ARGV[3]
-- microseconds from now. A lease already expired or released is not
-- brought back. Reply: now (s, ns), then the positions (1-based) of the
-- leases that were lost.
local k = KEYS[1]
local exp = fmtUs(nowUs + tonumber(ARGV[3]))
local out = {nowS, nowN}
local renewed = false
for i = 4, #ARGV do
  local s = pread('ZSCORE', k, ARGV[i])
  if s and tonumber(s) > nowUs then
    redis.call('ZADD', k, 'GT', exp, ARGV[i])
    renewed = true
  else
    out[#out + 1] = i - 3
  end
end
if renewed then expireLeases(k) end
return out
