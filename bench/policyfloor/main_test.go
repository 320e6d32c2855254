package main

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"

	"sluice/bench/internal/gofloor"
)

// TestFloorAnswersEachRequest: one DUNNO per request, requests of any
// length (a line longer than the read buffer included), and nothing for a
// request the stream cuts short.
func TestFloorAnswersEachRequest(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- gofloor.Serve(l, answer) }()
	defer func() {
		l.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	long := "sender=" + strings.Repeat("a", 10000) + "\n"
	in := "request=smtpd_access_policy\nprotocol_state=RCPT\n\n" + "request=smtpd_access_policy\n" + long + "\n" + "request=smtpd_access_policy\n"
	if _, err := io.WriteString(c, in); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(bufio.NewReader(c))
	if err != nil {
		t.Fatal(err)
	}
	if want := "action=DUNNO\n\naction=DUNNO\n\n"; string(got) != want {
		t.Fatalf("replies %q, want %q", got, want)
	}
}

func TestSkipRequest(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"a=b\n\n", nil},
		{"\n", nil},
		{"a=b\n", io.EOF},
		{"a=b", io.ErrUnexpectedEOF},
		{"", io.EOF},
	} {
		r := bufio.NewReaderSize(strings.NewReader(tc.in), 16)
		if err := skipRequest(r); err != tc.want {
			t.Errorf("skipRequest(%q) = %v, want %v", tc.in, err, tc.want)
		}
	}
}
