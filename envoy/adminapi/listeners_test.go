//go:build linux

package adminapi

import (
	"reflect"
	"testing"
)

func TestParseListeners(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    []Listener
		wantErr bool
	}{
		// Envoy 1.40's answer to GET /listeners?format=json, as printed.
		{"one listener", `{
 "listener_statuses": [
  {
   "name": "l",
   "local_address": {
    "socket_address": {
     "address": "127.0.0.1",
     "port_value": 19081
    }
   }
  }
 ]
}`, []Listener{{Name: "l", Address: "127.0.0.1:19081"}}, false},
		{"no listeners", `{}`, []Listener{}, false},
		{"IPv6", `{"listener_statuses":[{"name":"v6","local_address":{"socket_address":{"address":"::1","port_value":80}}}]}`,
			[]Listener{{Name: "v6", Address: "[::1]:80"}}, false},
		{"not JSON", `l::127.0.0.1:19081`, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseListeners([]byte(tt.body))
			if (err != nil) != tt.wantErr || (!tt.wantErr && !reflect.DeepEqual(got, tt.want)) {
				t.Fatalf("ParseListeners = %v, %v; want %v (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
