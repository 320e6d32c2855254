package cli

import (
	"sluice/internal/testutil/logbuf"
)

// syncBuffer is a log destination safe for several goroutines.
type syncBuffer = logbuf.Buffer
