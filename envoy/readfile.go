//go:build linux

package envoy

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// maxBootstrapSize bounds the bootstrap the proxy copies for an epoch.
const maxBootstrapSize = 64 << 20

// readBootstrap reads the bootstrap at path for a private copy. It opens it
// non-blocking and refuses anything but a regular file before reading, so
// that a FIFO put in its place cannot hang a start or a reload.
func readBootstrap(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxBootstrapSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxBootstrapSize {
		return nil, fmt.Errorf("%s is more than %d bytes", path, maxBootstrapSize)
	}
	return data, nil
}
