package main

import (
	"errors"
	"net"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/retry"
)

// outageLimit is how long --until-empty's probe waits for a database that
// went away (a restart, a failover) before it gives up, as the workers
// would keep waiting.
const outageLimit = 2 * time.Minute

// outage tracks --until-empty's probe through a database that went away:
// the workers back off and reconnect by themselves, so the probe waits for
// the database too instead of ending the command.
type outage struct{ since time.Time }

// ride reports whether err is the database going away for a while and
// the probe should try again: it says so once, and gives up after
// outageLimit.
func (o *outage) ride(e *env, err error) bool {
	if !transientFault(err) {
		return false
	}
	if o.since.IsZero() {
		o.since = time.Now()
		e.logf("the database is not answering (%v): waiting for it, as the workers do (at most %v)", err, outageLimit)
	}
	return time.Since(o.since) < outageLimit
}

// back notes a probe that went through after an outage.
func (o *outage) back(e *env) {
	if !o.since.IsZero() {
		e.logf("the database answers again after %v", time.Since(o.since).Round(time.Millisecond))
		o.since = time.Time{}
	}
}

// transientFault reports whether err says the database is restarting,
// failing over or unreachable, rather than that the request is wrong:
// errors a retry classifies as retryable, classes 08 (connection), 57
// (operator intervention: 57P01 shutdown, 57P03 cannot connect now) and
// 25006 (a read-only standby that a failover is about to promote), and
// network errors.
func transientFault(err error) bool {
	if retry.Classify(err) == retry.Retryable {
		return true
	}
	code := skiplock.SQLState(err)
	if strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57") || code == "25006" {
		return true
	}
	if code != "" {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || strings.Contains(err.Error(), "connect") || strings.Contains(err.Error(), "conn closed")
}
