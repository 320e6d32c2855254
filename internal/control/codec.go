// Package control is the administrator's door of `sluice serve`: a unix
// socket in the runtime directory (never TCP) whose peers' credentials
// are checked at connect and named in a log line with every command. Its
// protocol is one JSON object per line each way: a Request, then its
// Response. It imports no mail rules: the daemon's Handler acts.
package control

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Limits of one request. A line longer than MaxLine is refused before it
// is decoded; the counts bound what a decoded request holds.
const (
	DefaultMaxLine = 64 << 10
	maxCommand     = 32
	maxArgs        = 32
	maxAttrs       = 256
	maxName        = 64
	maxValue       = 4096
	// MaxResponse bounds a response a client reads.
	MaxResponse = 32 << 20
)

// ErrProtocol is wrapped by every error about a malformed request.
var ErrProtocol = errors.New("control: malformed request")

// Request is one command: its name ("key.show", "exempt.add"...), its
// named arguments, and for the commands that take one, the attributes of
// a policy request (Postfix names: sender, client_address...).
type Request struct {
	Command string            `json:"command"`
	Args    map[string]string `json:"args,omitempty"`
	Attrs   map[string]string `json:"attrs,omitempty"`
}

// Response is a command's answer: OK with a result (JSON, for -json) and
// the same as text for people, or an error.
type Response struct {
	OK     bool            `json:"ok"`
	Error  string          `json:"error,omitempty"`
	Text   string          `json:"text,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// ReadRequest reads one request line of at most maxLine bytes (0:
// DefaultMaxLine) and decodes it strictly: unknown fields, a second
// value on the line, a command outside [a-z.], too many or too long
// names and values, or text that is not UTF-8 are errors wrapping
// ErrProtocol. io.EOF before any byte means the peer is done.
func ReadRequest(r *bufio.Reader, maxLine int) (Request, error) {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	line, err := readLine(r, maxLine)
	if err != nil {
		return Request{}, err
	}
	return DecodeRequest(line)
}

// DecodeRequest decodes and checks one request line (without its
// newline).
func DecodeRequest(line []byte) (Request, error) {
	var req Request
	if !utf8.Valid(line) {
		return req, fmt.Errorf("%w: not UTF-8", ErrProtocol)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return Request{}, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	if dec.More() {
		return Request{}, fmt.Errorf("%w: more than one value on the line", ErrProtocol)
	}
	if err := req.check(); err != nil {
		return Request{}, err
	}
	return req, nil
}

func (req *Request) check() error {
	if req.Command == "" || len(req.Command) > maxCommand {
		return fmt.Errorf("%w: command empty or longer than %d bytes", ErrProtocol, maxCommand)
	}
	for _, c := range []byte(req.Command) {
		if (c < 'a' || c > 'z') && c != '.' {
			return fmt.Errorf("%w: command %q: only a-z and '.'", ErrProtocol, req.Command)
		}
	}
	if len(req.Args) > maxArgs || len(req.Attrs) > maxAttrs {
		return fmt.Errorf("%w: more than %d arguments or %d attributes", ErrProtocol, maxArgs, maxAttrs)
	}
	for _, m := range []map[string]string{req.Args, req.Attrs} {
		for k, v := range m {
			if k == "" || len(k) > maxName || len(v) > maxValue {
				return fmt.Errorf("%w: name %q empty or longer than %d bytes, or its value longer than %d", ErrProtocol, k, maxName, maxValue)
			}
		}
	}
	return nil
}

// readLine reads a line of at most max bytes, without its newline.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > max+1 {
			return nil, fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, max)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return bytes.TrimSuffix(line[:len(line)-1], []byte("\r")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, fmt.Errorf("%w: the line ends without a newline", ErrProtocol)
		default:
			return nil, err
		}
	}
}

// EncodeRequest writes req as one line.
func EncodeRequest(w io.Writer, req Request) error {
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("control: encode request: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteResponse writes resp as one line.
func WriteResponse(w io.Writer, resp Response) error {
	b, err := json.Marshal(resp)
	if err != nil {
		return fmt.Errorf("control: encode response: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadResponse reads one response line of at most MaxResponse bytes.
func ReadResponse(r *bufio.Reader) (Response, error) {
	line, err := readLine(r, MaxResponse)
	if err != nil {
		return Response{}, err
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return Response{}, fmt.Errorf("control: malformed response: %w", err)
	}
	return resp, nil
}
