// Package ads is what the agent's ADS server (envoy/xds) shares with the
// packages that make the bootstraps Envoy runs and the resources it is
// served: the resources themselves (Resource, of a Type), what the server
// says of them (Outcome, RejectedError, EpochStatus), the server as they
// call it (Server), and the pieces of a bootstrap that point an Envoy epoch
// at it (Bootstrap, ConfigSource). It links no gRPC and no protobuf, so
// that the configuration's checks (service/config), which link
// envoy/inplace and envoy/certs, stay small: the server and the converter
// of YAML to protobuf are envoy/xds's.
package ads
