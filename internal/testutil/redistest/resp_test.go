package redistest

import (
	"bufio"
	"reflect"
	"strings"
	"testing"
)

func TestReadReply(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want any
		err  bool
	}{
		{"+OK\r\n", "OK", false},
		{":42\r\n", int64(42), false},
		{"$3\r\nabc\r\n", "abc", false},
		{"$-1\r\n", "", false},
		{"*2\r\n$1\r\na\r\n:1\r\n", []any{"a", int64(1)}, false},
		{"*-1\r\n", []any(nil), false},
		{"-ERR nope\r\n", nil, true},
		{"", nil, true},
		{"\r\n", nil, true},
		{"?x\r\n", nil, true},
		{":x\r\n", nil, true},
		{"$5\r\nab\r\n", nil, true},
		{"*2\r\n:1\r\n", nil, true},
		{"$x\r\n", nil, true},
	} {
		got, err := readReply(bufio.NewReader(strings.NewReader(tc.in)))
		if (err != nil) != tc.err {
			t.Errorf("%q: err %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if !tc.err && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: got %#v, want %#v", tc.in, got, tc.want)
		}
	}
}

func FuzzReadReply(f *testing.F) {
	for _, s := range []string{"+OK\r\n", "*2\r\n$1\r\na\r\n:1\r\n", "-ERR x\r\n", "$-1\r\n", "*1\r\n*1\r\n:5\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		readReply(bufio.NewReader(strings.NewReader(in))) // must not panic or hang
	})
}
