package smtptest

import (
	"bufio"
	"strings"
	"testing"
)

func TestReadReply(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Reply
		wantErr string
	}{
		{in: "220 mx.example ESMTP\r\n", want: Reply{220, "mx.example ESMTP"}},
		{in: "250-mx.example\r\n250-PIPELINING\r\n250 8BITMIME\r\n", want: Reply{250, "mx.example\nPIPELINING\n8BITMIME"}},
		{in: "421\r\n", want: Reply{421, ""}},
		{in: "250-a\r\n251 b\r\n", wantErr: "reply code changed"},
		{in: "25\r\n", wantErr: "malformed reply line"},
		{in: "abc text\r\n", wantErr: "malformed reply code"},
		{in: "999 text\r\n", wantErr: "malformed reply code"},
		{in: "250_text\r\n", wantErr: "malformed reply line"},
		{in: "250-more", wantErr: "partial reply line"},
		{in: "250-more\r\n", wantErr: "EOF"},
	} {
		got, err := ReadReply(bufio.NewReader(strings.NewReader(tc.in)))
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ReadReply(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("ReadReply(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}
