package socketmap

import (
	"context"
	"io"
	"time"
)

// ServeConn answers requests on rw as a connection of a Server does, with
// no Server around it.
func ServeConn(ctx context.Context, rw io.ReadWriter, h Handler, writeTimeout time.Duration) {
	serve(ctx, rw, rw, h, writeTimeout, func() bool { return true })
}
