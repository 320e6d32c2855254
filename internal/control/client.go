package control

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"time"
)

// Do sends one request to the control socket at path and returns the
// response; ctx bounds the whole exchange.
func Do(ctx context.Context, path string, req Request) (Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return Response{}, fmt.Errorf("control socket: %w", err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Now().Add(time.Minute))
	}
	werr := EncodeRequest(c, req)
	// A refused peer is answered and closed before its request is read:
	// its write may fail, the answer is still there to read.
	resp, err := ReadResponse(bufio.NewReader(c))
	if err != nil {
		if werr != nil {
			err = werr
		}
		return Response{}, fmt.Errorf("control socket: %w", err)
	}
	return resp, nil
}
