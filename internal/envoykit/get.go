package envoykit

import (
	"bytes"
	"net/http"
	"strconv"
	"time"
)

// Response is what Get saw.
type Response struct {
	Code   int
	Body   string
	Header http.Header
	Close  bool // the server asked to close the connection
}

// Get is an HTTP GET on a fresh connection, with a timeout.
func Get(url string, timeout time.Duration) (Response, error) {
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return Response{Code: resp.StatusCode, Body: b.String(), Header: resp.Header, Close: resp.Close}, err
}

// URL is http://127.0.0.1:port followed by path.
func URL(port int, path string) string { return "http://127.0.0.1:" + strconv.Itoa(port) + path }
