// Package policy speaks Postfix's SMTPD access policy delegation protocol
// (check_policy_service): persistent connections carrying one request at a
// time, each a list of "name=value" lines ended by an empty line, answered
// with "action=..." and an empty line.
package policy

import (
	"reflect"
	"strings"
)

// Request is one policy query. Every attribute Postfix 2.1 to 3.12 sends
// has a field, named after it (HeloName is helo_name, CCertSubject
// ccert_subject, TLSSNI tls_sni...) and grouped under the Postfix release
// that added it; unknown attributes are ignored. An attribute Postfix
// leaves out is empty (numbers: 0). Postfix's SMTPD_POLICY_README gives
// each one's meaning; internal/postfixattr lists them.
type Request struct {
	Request           string // always "smtpd_access_policy"
	ProtocolState     string // CONNECT EHLO HELO MAIL RCPT DATA END-OF-MESSAGE VRFY ETRN
	ProtocolName      string // SMTP or ESMTP
	HeloName          string
	QueueID           string
	Sender            string
	Recipient         string
	RecipientCount    int64
	ClientAddress     string
	ClientName        string
	ReverseClientName string
	Instance          string
	// 2.2
	SASLMethod       string
	SASLUsername     string
	SASLSender       string
	Size             int64
	CCertSubject     string
	CCertIssuer      string
	CCertFingerprint string
	// 2.3
	EncryptionProtocol string
	EncryptionCipher   string
	EncryptionKeysize  int64
	ETRNDomain         string
	// 2.5
	Stress string
	// 2.9
	CCertPubkeyFingerprint string
	// 3.0
	ClientPort string
	// 3.1
	PolicyContext string
	// 3.2
	ServerAddress string
	ServerPort    string
	// 3.8
	CompatibilityLevel string
	MailVersion        string
	// 3.12
	TLSSNI string
}

// Reset clears r for reuse.
func (r *Request) Reset() { *r = Request{} }

// Clone returns a copy of r whose strings are its own: a Decoder's
// request is valid only until its next Decode.
func (r *Request) Clone() Request {
	c := *r
	v := reflect.ValueOf(&c).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.String {
			f.SetString(strings.Clone(f.String()))
		}
	}
	return c
}

// field returns a pointer to the string field for name, or nil.
func (r *Request) field(name string) *string {
	switch name {
	case "request":
		return &r.Request
	case "protocol_state":
		return &r.ProtocolState
	case "protocol_name":
		return &r.ProtocolName
	case "helo_name":
		return &r.HeloName
	case "queue_id":
		return &r.QueueID
	case "sender":
		return &r.Sender
	case "recipient":
		return &r.Recipient
	case "client_address":
		return &r.ClientAddress
	case "client_name":
		return &r.ClientName
	case "reverse_client_name":
		return &r.ReverseClientName
	case "instance":
		return &r.Instance
	case "sasl_method":
		return &r.SASLMethod
	case "sasl_username":
		return &r.SASLUsername
	case "sasl_sender":
		return &r.SASLSender
	case "ccert_subject":
		return &r.CCertSubject
	case "ccert_issuer":
		return &r.CCertIssuer
	case "ccert_fingerprint":
		return &r.CCertFingerprint
	case "encryption_protocol":
		return &r.EncryptionProtocol
	case "encryption_cipher":
		return &r.EncryptionCipher
	case "etrn_domain":
		return &r.ETRNDomain
	case "stress":
		return &r.Stress
	case "ccert_pubkey_fingerprint":
		return &r.CCertPubkeyFingerprint
	case "client_port":
		return &r.ClientPort
	case "policy_context":
		return &r.PolicyContext
	case "server_address":
		return &r.ServerAddress
	case "server_port":
		return &r.ServerPort
	case "compatibility_level":
		return &r.CompatibilityLevel
	case "mail_version":
		return &r.MailVersion
	case "tls_sni":
		return &r.TLSSNI
	}
	return nil
}

// number returns a pointer to the numeric field for name, or nil.
func (r *Request) number(name string) *int64 {
	switch name {
	case "recipient_count":
		return &r.RecipientCount
	case "size":
		return &r.Size
	case "encryption_keysize":
		return &r.EncryptionKeysize
	}
	return nil
}

// Attr returns the value of the attribute name as text ("" if unknown or
// absent), for rules that key on any attribute.
func (r *Request) Attr(name string) (string, bool) {
	if p := r.field(name); p != nil {
		return *p, true
	}
	if p := r.number(name); p != nil {
		if *p == 0 {
			return "", true
		}
		return itoa(*p), true
	}
	return "", false
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := v < 0
	if neg {
		v = -v
	}
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
