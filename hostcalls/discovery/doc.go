// Package discovery is the companion's pool discovery: it follows where the
// prefill and decode engines are, from a source chosen per pool, and serves
// the current sets to the pdroute filter with a version and a long poll.
//
// Sources (see Config): "static" (a fixed list), "file" (a JSON file of the
// plugin configuration's pool shape, re-read when it changes), "dns" (a
// headless Service name and port, re-resolved on an interval) and
// "kubernetes" (pods selected by label, in the subpackage kube so that only
// a binary that wants it links client-go; it registers itself with
// RegisterSource).
//
// The filter asks GET /v1/pools?version=V&wait_ms=T (see Handler). Until
// every pool's source has delivered once the answer is 503, so a restarting
// companion never tells the filter that a pool is empty: the filter keeps
// routing by its last good sets meanwhile. A source that fails later keeps
// its last list.
//
// Scraper scrapes every engine of the sets once per interval and serves the
// stats on GET /v1/stats, so that the engines' /metrics load does not grow
// with the number of proxies.
package discovery
