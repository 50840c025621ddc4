// Package shape holds no code: its tests check the shape of the source tree that no linter
// checks (`make lint` runs them). Each package has one package doc that `go doc` opens with; no
// package holds more than maxFiles files; cmd/envoy-agent imports only service/... and the
// internal packages meant for it.
package shape
