//go:build linux

package certs

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
)

// refreshAll is refresh of each of secrets, as a bootstrap's are served
// (Serve): their files read on that many goroutines (1,000 pairs read one
// by one took 160 ms of a start), and those that changed published at once
// (one by one, an Envoy subscribed to them acknowledges each before the
// next). It returns the first error in secrets' order.
func (m *Manager) refreshAll(secrets []Secret, goroutines int) error {
	m.batches.Add(1)
	defer func() {
		if m.batches.Add(-1) == 0 && m.batchChanged.Swap(false) {
			m.changed()
		}
	}()
	errs := make([]error, len(secrets))
	changed := make([]bool, len(secrets))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(goroutines, len(secrets)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(secrets); i = int(next.Add(1) - 1) {
				_, changed[i], errs[i] = m.read(secrets[i], true)
			}
		})
	}
	wg.Wait()
	var publish []Secret
	for i, s := range secrets {
		if changed[i] {
			publish = append(publish, s)
		}
	}
	m.publishAll(publish)
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// publishAll publishes secrets at once (UpdateSecrets). A rejection
// publishes them one by one instead: each then meets its own outcome, and
// a rejected renewal puts back the certificate before it (publish).
func (m *Manager) publishAll(secrets []Secret) {
	if len(secrets) < 2 {
		for _, s := range secrets {
			m.publish(s)
		}
		return
	}
	m.pubMu.Lock()
	rs := make([]ads.Resource, 0, len(secrets))
	m.mu.Lock()
	for _, s := range secrets {
		if mat := m.served[s.Name]; mat != nil {
			rs = append(rs, mat.served)
		}
	}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	_, err := m.server.UpdateSecrets(ctx, rs)
	cancel()
	m.pubMu.Unlock()
	var rej *ads.RejectedError
	switch {
	case errors.As(err, &rej):
		for _, s := range secrets {
			m.publish(s)
		}
	case err != nil:
		m.log.Errorf("certificates: serving %d certificates: %v", len(rs), err)
	}
}

// Loading is the read of a bootstrap's certificates that a Serve armed by
// LoadNextInBackground left to goroutines of its own.
type Loading struct {
	done    chan struct{}
	err     error
	started atomic.Bool
	once    sync.Once
}

// LoadNextInBackground arms the next Serve to return before it reads the
// certificates' files, and read them on goroutines of its own: a first
// start's, so that Envoy's own start overlaps the read (Envoy asks for the
// secrets once it has parsed its listeners: 280 ms into a start of 1,000
// TLS filter chains, while the read took 160 to 200 ms). The Loading says
// whether a Serve took it, and how the read ended: with the error that
// Serve would have returned, and then Envoy must not serve (it waits for
// the secrets, or lacks one).
func (m *Manager) LoadNextInBackground() *Loading {
	l := &Loading{done: make(chan struct{})}
	m.mu.Lock()
	m.background = l
	m.mu.Unlock()
	return l
}

// Disarm leaves the next Serve to read the files before it returns, if no
// Serve took l yet: l then ends, with nothing read. nil-safe.
func (m *Manager) Disarm(l *Loading) {
	if l == nil {
		return
	}
	m.mu.Lock()
	if m.background == l {
		m.background = nil
		l.end(nil)
	}
	m.mu.Unlock()
}

// Started reports whether a Serve took l: it ends (Done) once the files
// are read.
func (l *Loading) Started() bool { return l.started.Load() }

// Done is closed once the read ended (Err says how), or once a Serve found
// no certificate to read.
func (l *Loading) Done() <-chan struct{} { return l.done }

// Err is the read's error, once Done is closed: nil when every secret is
// served.
func (l *Loading) Err() error {
	<-l.done
	return l.err
}

// end ends l with err; nil-safe.
func (l *Loading) end(err error) {
	if l == nil {
		return
	}
	l.once.Do(func() {
		l.err = err
		close(l.done)
	})
}
