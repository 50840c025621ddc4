//go:build !linux

package main

// envoy-agent runs on Linux only (see envoy/unsupported.go).
var _ = envoyAgentBuildsOnLinuxOnly
