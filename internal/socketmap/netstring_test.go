package socketmap

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadNetstring(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string
		wantErr error
	}{
		{"15:rev hello world,", "rev hello world", nil},
		{"0:,", "", nil},
		{"7:nospace,", "nospace", nil},
		{"3:abcX", "abc", ErrNoComma},
		{"x:abc,", "", ErrBadLength},
		{":abc,", "", ErrBadLength},
		{"-1:abc,", "", ErrBadLength},
		{"65537:", "", ErrBadLength},
		{"0000000000000001:a,", "a", nil},
		{"000000000000001:a,", "a", nil},
		// Past 16 bytes the prefix is thrown away up to ':'.
		{"00000000000000003:a b,", "", ErrNoComma},
		{"0000000000000001xxxxxxxxxxxxxxxxxxxx:a,", "a", nil},
		{"1234567890123456:", "", ErrBadLength},
		// Leading white space, a sign, trailing junk, 32-bit wrap-around.
		{" 3:a b,", "a b", nil},
		{"+3:a b,", "a b", nil},
		{"3 :a b,", "a b", nil},
		{"3x:a b,", "a b", nil},
		{"0x3:a b,", "", ErrNoComma},
		{"-0:,", "", nil},
		{"4294967299:a b,", "a b", nil},
		{"-4294967293:a b,", "a b", nil},
		{"2147483651:a b,", "", ErrBadLength},
		{"- 3:a,", "", ErrBadLength},
		{"\t\n\v\f\r 3:a b,", "a b", nil},
		{"\\t3:a,", "", ErrBadLength},
		{"65536:", "", io.ErrUnexpectedEOF},
		{"5:ab", "", io.ErrUnexpectedEOF},
		{"12", "", io.ErrUnexpectedEOF},
		{"", "", io.EOF},
	} {
		got, err := ReadNetstring(bufio.NewReader(strings.NewReader(tc.in)))
		if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil || tc.wantErr == ErrNoComma) && string(got) != tc.want {
			t.Errorf("%q: got %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
	// Two requests on one stream, the first without its comma.
	r := bufio.NewReader(strings.NewReader("3:abcX3:def,"))
	if _, err := ReadNetstring(r); !errors.Is(err, ErrNoComma) {
		t.Fatal(err)
	}
	if got, err := ReadNetstring(r); err != nil || string(got) != "def" {
		t.Fatalf("after a missing comma: %q %v", got, err)
	}
	if got := string(AppendNetstring(nil, "NOTFOUND ")); got != "9:NOTFOUND ," {
		t.Fatalf("append: %q", got)
	}
}

func FuzzNetstring(f *testing.F) {
	for _, s := range []string{"15:rev hello world,", "0:,", "3:abcX", "65536:", "x:", "999999999999999999999:", "1:a,1:b,"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		for range 100 {
			p, err := ReadNetstring(r)
			if err != nil && !errors.Is(err, ErrNoComma) {
				return
			}
			if len(p) > MaxLen {
				t.Fatalf("payload of %d bytes", len(p))
			}
			if err == nil {
				again, err := ReadNetstring(bufio.NewReader(bytes.NewReader(AppendNetstring(nil, string(p)))))
				if err != nil || !bytes.Equal(again, p) {
					t.Fatalf("round trip of %q: %q %v", p, again, err)
				}
			}
		}
	})
}
