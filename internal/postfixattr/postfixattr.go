// Package postfixattr lists the attributes of Postfix's SMTPD access policy
// delegation requests, with the release that added each.
package postfixattr

// Since maps every request attribute to the Postfix release that added it.
var Since = map[string]string{
	"request": "2.1", "protocol_state": "2.1", "protocol_name": "2.1", "helo_name": "2.1",
	"queue_id": "2.1", "sender": "2.1", "recipient": "2.1", "recipient_count": "2.1",
	"client_address": "2.1", "client_name": "2.1", "reverse_client_name": "2.1", "instance": "2.1",
	"sasl_method": "2.2", "sasl_username": "2.2", "sasl_sender": "2.2", "size": "2.2",
	"ccert_subject": "2.2", "ccert_issuer": "2.2", "ccert_fingerprint": "2.2",
	"encryption_protocol": "2.3", "encryption_cipher": "2.3", "encryption_keysize": "2.3", "etrn_domain": "2.3",
	"stress":                   "2.5",
	"ccert_pubkey_fingerprint": "2.9",
	"client_port":              "3.0",
	"policy_context":           "3.1",
	"server_address":           "3.2", "server_port": "3.2",
	"compatibility_level": "3.8", "mail_version": "3.8",
	"tls_sni": "3.12",
}

// Known reports whether name is a request attribute.
func Known(name string) bool {
	_, ok := Since[name]
	return ok
}

// States are the values of protocol_state.
var States = []string{"CONNECT", "EHLO", "HELO", "MAIL", "RCPT", "DATA", "END-OF-MESSAGE", "VRFY", "ETRN"}
