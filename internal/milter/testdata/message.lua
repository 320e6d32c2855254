-- Full messages: every step answered, every modification at EOM checked
-- with mt.eom_check, a second message on the same connection refused
-- with a multi-line reply code, and a third one after ABORT.
local sock = "inet:" .. port .. "@127.0.0.1"
local conn = mt.connect(sock, 5, 0.2)
if conn == nil then error("mt.connect failed") end

local function step(err, what, want)
	if err ~= nil then error(what .. " failed: " .. err) end
	if mt.getreply(conn) ~= (want or SMFIR_CONTINUE) then error(what .. ": unexpected reply") end
end

mt.macro(conn, SMFIC_CONNECT, "j", "mx.example", "{daemon_name}", "smtpd")
step(mt.conninfo(conn, "client.example", "192.0.2.1"), "conninfo")
step(mt.helo(conn, "client.example"), "helo")

-- Message 1: accepted, with modifications.
mt.macro(conn, SMFIC_MAIL, "i", "QID1", "{mail_addr}", "sender@example.org")
step(mt.mailfrom(conn, "<sender@example.org>", "SIZE=100"), "mailfrom")
step(mt.rcptto(conn, "<gone@example.org>"), "rcptto")
step(mt.header(conn, "Subject", "hello"), "header Subject")
step(mt.header(conn, "X-Remove", "me"), "header X-Remove")
step(mt.eoh(conn), "eoh")
step(mt.bodystring(conn, "original body\r\n"), "body")
step(mt.eom(conn), "eom", SMFIR_ACCEPT)
local checks = {
	{MT_HDRADD, "X-Sluice", "checked qid=QID1 j=mx.example"},
	{MT_HDRINSERT, "X-First", "1", 0},
	{MT_HDRCHANGE, "Subject", "changed"},
	{MT_HDRDELETE, "X-Remove"},
	{MT_RCPTADD, "<added@example.org>"},
	{MT_RCPTDELETE, "<gone@example.org>"},
	{MT_BODYCHANGE, "new body\r\n"},
	{MT_QUARANTINE, "held by sluice"},
}
for _, c in ipairs(checks) do
	if not mt.eom_check(conn, table.unpack(c)) then error("eom_check failed for " .. c[2]) end
end
if mt.getheader(conn, "X-Sluice", 0) ~= "checked qid=QID1 j=mx.example" then error("X-Sluice value") end
if mt.abort(conn) ~= nil then error("mt.abort failed") end

-- Message 2: refused at EOM with a custom reply.
step(mt.mailfrom(conn, "<sender@example.org>"), "mailfrom 2")
step(mt.rcptto(conn, "<rcpt@example.net>"), "rcptto 2")
step(mt.header(conn, "Subject", "reject me"), "header 2")
step(mt.eoh(conn), "eoh 2")
step(mt.eom(conn), "eom 2", SMFIR_REPLYCODE)
if not mt.eom_check(conn, MT_SMTPREPLY, "550", "5.7.1", "rejected by sluice") then error("reply code not as expected") end
if mt.eom_check(conn, MT_HDRADD) then error("modifications sent with a rejection") end
if mt.abort(conn) ~= nil then error("mt.abort failed") end

-- Message 3: aborted half way, then a clean one.
step(mt.mailfrom(conn, "<sender@example.org>"), "mailfrom 3")
if mt.abort(conn) ~= nil then error("mt.abort failed") end
step(mt.mailfrom(conn, "<sender@example.org>"), "mailfrom 4")
step(mt.rcptto(conn, "<rcpt@example.net>"), "rcptto 4")
step(mt.header(conn, "Subject", "plain"), "header 4")
step(mt.eoh(conn), "eoh 4")
step(mt.bodystring(conn, "body\r\n"), "body 4")
step(mt.eom(conn), "eom 4", SMFIR_ACCEPT)
mt.disconnect(conn)
mt.echo("message: ok")
