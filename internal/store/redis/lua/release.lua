-- release.lua: end the lease ARGV[3] ("id@owner"; ARGV[4] is "id@", which
-- finds it under another owner's name too).
-- Reply: held, keys delta, now (s, ns).
local k = KEYS[1]
local held = leases(k)
if held > 0 then
  local gone = redis.call('ZREM', k, ARGV[3])
  if gone == 0 then
    local pfx = ARGV[4]
    for _, m in ipairs(redis.call('ZRANGE', k, 0, -1)) do
      if string.sub(m, 1, #pfx) == pfx then
        gone = redis.call('ZREM', k, m)
        break
      end
    end
  end
  held = held - gone
  if held > 0 then expireLeases(k) else setLive(k, false) end
end
return {held, keysDelta(), nowS, nowN}
