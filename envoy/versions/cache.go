//go:build linux

// Package versions asks an Envoy binary what it says of itself (--version,
// --hot-restart-version), once per file.
package versions

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/safefile"
)

// Each question is a full start of a 100 MB binary (about 33 ms each on
// the bench machine), and a reload asks both of a binary that has almost
// never changed since the last one. Cache keeps the answers keyed on
// the file's identity: a new file, an edit in place, a chmod or a touch
// changes one of device, inode, size, modification or change time, and the
// binary is asked again. Only answers the file gave while it kept one
// identity (stat before and after the run) are kept, and only successful
// ones: a timeout on a busy host is asked again next time.

// questionTimeout bounds one question: the binary only prints a string,
// but a cold start of a 100 MB binary from a slow disk can take seconds.
const questionTimeout = 30 * time.Second

// truncate is s cut to n bytes, for error messages.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// versionQuestion is one flag whose answer is cached.
type versionQuestion string

// The questions the agent asks a binary.
const (
	askVersion           versionQuestion = "--version"
	askHotRestartVersion versionQuestion = "--hot-restart-version"
)

type versionKey struct {
	path string
	q    versionQuestion
}

type versionAnswer struct {
	id   safefile.Identity
	text string
}

// Cache answers --version and --hot-restart-version for Envoy
// binaries, running each once per file identity. The zero value is ready;
// it is safe for concurrent use, and never holds its lock while a binary
// runs.
type Cache struct {
	mu      sync.Mutex
	answers map[versionKey]versionAnswer
}

// Version is `binary --version`'s output, trimmed. It fails when the
// binary cannot be run, exits non-zero or does not answer within ctx.
func (c *Cache) Version(ctx context.Context, binary string) (string, error) {
	return c.ask(ctx, binary, askVersion)
}

// HotRestartVersion is the binary's hot-restart compatibility string:
// two Envoys can hot restart into each other only when theirs are equal.
func (c *Cache) HotRestartVersion(ctx context.Context, binary string) (string, error) {
	out, err := c.ask(ctx, binary, askHotRestartVersion)
	if err != nil {
		return "", err
	}
	// Envoy prints it alone on a line, last.
	lines := strings.Split(out, "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

// Cached is the cached answer to --version and --hot-restart-version for
// the file at binary now, without running anything; ok is false when
// either is not known for this very file.
func (c *Cache) Cached(binary string) (version, hotRestart string, ok bool) {
	id, err := safefile.Identify(binary)
	if err != nil {
		return "", "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, okV := c.answers[versionKey{binary, askVersion}]
	h, okH := c.answers[versionKey{binary, askHotRestartVersion}]
	if !okV || !okH || v.id != id || h.id != id {
		return "", "", false
	}
	lines := strings.Split(h.text, "\n")
	return v.text, strings.TrimSpace(lines[len(lines)-1]), true
}

func (c *Cache) ask(ctx context.Context, binary string, q versionQuestion) (string, error) {
	before, err := safefile.Identify(binary)
	if err != nil {
		return "", err
	}
	key := versionKey{binary, q}
	c.mu.Lock()
	a, ok := c.answers[key]
	c.mu.Unlock()
	if ok && a.id == before {
		return a.text, nil
	}
	ctx, cancel := context.WithTimeout(ctx, questionTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, string(q))
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	text := strings.TrimSpace(out.String())
	if err != nil {
		if ctx.Err() != nil {
			return text, fmt.Errorf("%s %s did not answer within %s: %w", binary, q, questionTimeout, ctx.Err())
		}
		return text, fmt.Errorf("%s %s: %w: %s", binary, q, err, truncate(text, 200))
	}
	if after, err := safefile.Identify(binary); err == nil && after == before {
		c.mu.Lock()
		if c.answers == nil {
			c.answers = map[versionKey]versionAnswer{}
		}
		c.answers[key] = versionAnswer{id: before, text: text}
		c.mu.Unlock()
	}
	return text, nil
}
