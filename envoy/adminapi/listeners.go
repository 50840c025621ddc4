//go:build linux

package adminapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
)

// Listener is one of Envoy's listeners as GET /listeners reports it.
type Listener struct {
	Name    string `json:"name"`
	Address string `json:"address"` // host:port, a pipe path, or "" when Envoy gives none
}

// Listeners asks GET /listeners?format=json for Envoy's active listeners.
func (c *Client) Listeners(ctx context.Context) ([]Listener, error) {
	code, body, err := c.do(ctx, http.MethodGet, "/listeners?format=json")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /listeners: %s", statusText(code, body))
	}
	return ParseListeners(body)
}

// ParseListeners decodes the JSON answer of GET /listeners?format=json.
func ParseListeners(body []byte) ([]Listener, error) {
	var doc struct {
		Statuses []struct {
			Name         string `json:"name"`
			LocalAddress struct {
				SocketAddress struct {
					Address   string `json:"address"`
					PortValue int    `json:"port_value"`
				} `json:"socket_address"`
				Pipe struct {
					Path string `json:"path"`
				} `json:"pipe"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("decode /listeners: %w", err)
	}
	out := make([]Listener, 0, len(doc.Statuses))
	for _, s := range doc.Statuses {
		l := Listener{Name: s.Name}
		switch sa := s.LocalAddress.SocketAddress; {
		case sa.Address != "":
			l.Address = net.JoinHostPort(sa.Address, strconv.Itoa(sa.PortValue))
		case s.LocalAddress.Pipe.Path != "":
			l.Address = s.LocalAddress.Pipe.Path
		}
		out = append(out, l)
	}
	return out, nil
}
