package main

import (
	"fmt"
	"strconv"
)

// parts holds the prebuilt pieces every request is assembled from, in the
// order Postfix 3.7 sends the attributes, so that building a request only
// copies bytes into a reused buffer.
type parts struct {
	headRCPT, headEOM []byte   // request, protocol_state, protocol_name
	clientA           [][]byte // client_address, client_name, "client_port="
	clientB           [][]byte // reverse_client_name, server_*, helo_name
	sender            [][]byte // "sender=...\n"
	recipient         [][]byte // the address only
	tail              []byte   // etrn_domain ... mail_version, empty line
}

func buildParts(clients, senders int, probeSender string) *parts {
	p := &parts{
		headRCPT: []byte("request=smtpd_access_policy\nprotocol_state=RCPT\nprotocol_name=ESMTP\n"),
		headEOM:  []byte("request=smtpd_access_policy\nprotocol_state=END-OF-MESSAGE\nprotocol_name=ESMTP\n"),
		tail: []byte("etrn_domain=\nstress=\nsasl_method=\nsasl_username=\nsasl_sender=\n" +
			"ccert_subject=\nccert_issuer=\nccert_fingerprint=\nccert_pubkey_fingerprint=\n" +
			"encryption_protocol=TLSv1.3\nencryption_cipher=TLS_AES_256_GCM_SHA384\nencryption_keysize=256\n" +
			"policy_context=\ncompatibility_level=3.6\nmail_version=3.7.11\n\n"),
	}
	p.clientA = make([][]byte, clients)
	p.clientB = make([][]byte, clients)
	for i := range clients {
		a := i + 1
		addr := fmt.Sprintf("10.%d.%d.%d", a>>16&255, a>>8&255, a&255)
		name := fmt.Sprintf("outbound-relay-%04d.mail-cluster-%02d.customer-%04d.hosting-provider.example", i, i%16, i)
		p.clientA[i] = []byte("client_address=" + addr + "\nclient_name=" + name + "\nclient_port=")
		p.clientB[i] = []byte("\nreverse_client_name=" + name +
			"\nserver_address=192.0.2.25\nserver_port=25\nhelo_name=" + name + "\n")
	}
	p.sender = make([][]byte, senders, senders+1)
	for i := range senders {
		p.sender[i] = fmt.Appendf(nil, "sender=user%d@sender%d.example\n", i, i%100)
	}
	// The probe sender is the last entry, past the load's senders.
	p.sender = append(p.sender, []byte("sender="+probeSender+"\n"))
	p.recipient = make([][]byte, numRecipients)
	for i := range numRecipients {
		p.recipient[i] = fmt.Appendf(nil, "firstname.lastname.%04d@mail.recipient-domain-%03d.example.org", i, i%300)
	}
	return p
}

// message describes one simulated message.
type message struct {
	client int
	port   int
	sender int
	rcpts  [3]int
	n      int    // number of recipients, 1..3
	size   int    // final size; the MAIL FROM SIZE= value is a bit smaller
	seq    uint64 // per-worker message number, for instance and queue_id
}

// appendRequest appends the wire form of one request about m to dst: an
// RCPT request for recipient k (0-based) if eom is false, else the
// END-OF-MESSAGE request.
func (p *parts) appendRequest(dst []byte, m *message, eom bool, k int, instPrefix []byte, worker int) []byte {
	if eom {
		dst = append(dst, p.headEOM...)
	} else {
		dst = append(dst, p.headRCPT...)
	}
	dst = append(dst, p.clientA[m.client]...)
	dst = strconv.AppendInt(dst, int64(m.port), 10)
	dst = append(dst, p.clientB[m.client]...)
	dst = append(dst, p.sender[m.sender]...)
	dst = append(dst, "recipient="...)
	switch {
	case !eom:
		dst = append(dst, p.recipient[m.rcpts[k]]...)
	case m.n == 1:
		dst = append(dst, p.recipient[m.rcpts[0]]...)
	}
	dst = append(dst, "\nrecipient_count="...)
	if eom {
		dst = strconv.AppendInt(dst, int64(m.n), 10)
	} else {
		dst = append(dst, '0')
	}
	// With smtpd_delay_open_until_valid_rcpt (the default), the queue file,
	// and so the queue ID, exists only after the first accepted recipient.
	dst = append(dst, "\nqueue_id="...)
	if eom || k > 0 {
		dst = appendQueueID(dst, uint64(worker)<<28|m.seq&(1<<28-1))
	}
	dst = append(dst, "\ninstance="...)
	dst = append(dst, instPrefix...)
	dst = strconv.AppendUint(dst, m.seq, 16)
	dst = append(dst, ".0\nsize="...)
	if eom {
		dst = strconv.AppendInt(dst, int64(m.size), 10)
	} else {
		dst = strconv.AppendInt(dst, int64(m.size-m.size/64), 10)
	}
	dst = append(dst, '\n')
	return append(dst, p.tail...)
}

// appendQueueID appends v as a short Postfix queue ID: 10 upper-case hex
// digits.
func appendQueueID(dst []byte, v uint64) []byte {
	const digits = "0123456789ABCDEF"
	for shift := 36; shift >= 0; shift -= 4 {
		dst = append(dst, digits[v>>uint(shift)&15])
	}
	return dst
}
