-- release.lua: end the lease ARGV[3] ("id@owner"; ARGV[4] is "id@", which
-- finds it under another owner's name too). Reply: held, keys delta, now.
local k = KEYS[1]
local kd = kind(k, 'zset')
local seen = {[k] = kd ~= 'none'}
if kd == 'other' then redis.call('DEL', k) end
local held = 0
if kd == 'same' then
  if redis.call('ZREM', k, ARGV[3]) == 0 then
    local pfx = ARGV[4]
    for _, m in ipairs(redis.call('ZRANGE', k, 0, -1)) do
      if string.sub(m, 1, #pfx) == pfx then
        redis.call('ZREM', k, m)
        break
      end
    end
  end
  redis.call('ZREMRANGEBYSCORE', k, '-inf', fmtUs(nowUs))
  held = redis.call('ZCARD', k)
  if held > 0 then expireLeases(k) end
end
return {held, keysDelta(seen), nowS, nowN}
