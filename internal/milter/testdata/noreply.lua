-- No-reply steps: the engine negotiates NR_* for HELO, MAIL, RCPT,
-- HEADER, EOH and BODY (its options ask for them); miltertest then sends
-- those commands without waiting, and the first reply after them must
-- be the one to EOM. A stray reply would desynchronise the stream.
local sock = "inet:" .. port .. "@127.0.0.1"
local conn = mt.connect(sock, 5, 0.2)
if conn == nil then error("mt.connect failed") end
if mt.negotiate(conn, nil, nil, nil) ~= nil then error("mt.negotiate failed") end
for _, opt in ipairs({SMFIP_NR_HELO, SMFIP_NR_MAIL, SMFIP_NR_RCPT, SMFIP_NR_HDR, SMFIP_NR_EOH, SMFIP_NR_BODY}) do
	if not mt.test_option(conn, opt) then error("no-reply option not negotiated: " .. opt) end
end
if mt.test_option(conn, SMFIP_NR_CONN) then error("NR_CONN negotiated") end

if mt.conninfo(conn, "client.example", "192.0.2.1") ~= nil then error("mt.conninfo failed") end
if mt.getreply(conn) ~= SMFIR_CONTINUE then error("CONNECT not continued") end
for i = 1, 3 do
	if mt.helo(conn, "client.example") ~= nil then error("mt.helo failed") end
	if mt.mailfrom(conn, "<sender@example.org>") ~= nil then error("mt.mailfrom failed") end
	if mt.rcptto(conn, "<rcpt@example.net>") ~= nil then error("mt.rcptto failed") end
	if mt.header(conn, "Subject", "no reply " .. i) ~= nil then error("mt.header failed") end
	if mt.header(conn, "From", "<sender@example.org>") ~= nil then error("mt.header failed") end
	if mt.eoh(conn) ~= nil then error("mt.eoh failed") end
	if mt.bodystring(conn, "line one\r\nline two\r\n") ~= nil then error("mt.bodystring failed") end
	if mt.eom(conn) ~= nil then error("mt.eom failed") end
	if mt.getreply(conn) ~= SMFIR_ACCEPT then error("EOM not accepted in message " .. i) end
	if mt.abort(conn) ~= nil then error("mt.abort failed") end
end
mt.disconnect(conn)
mt.echo("noreply: ok")
