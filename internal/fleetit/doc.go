// Package fleetit is the fleet's end-to-end test, and nothing else: three
// iosched daemons, each the only one of its "machine", write their
// metrics files; three node_exporters export them; a real Prometheus
// scrapes them every second with the rules of contrib/prometheus; and
// iosched fleet's view of that Prometheus is checked against what the
// test reads itself from the loop devices' stat files and the daemons'
// probe records (fleet_integration_test.go).
package fleetit
