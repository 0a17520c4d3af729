package config

import "fmt"

// Warnings lists what is valid in c but almost certainly not what was
// meant, one "path: message" line each (pdroute-config check prints them;
// the filter logs them at configure time).
func (c *Config) Warnings() []string {
	var w []string
	if c.Mode == ModeSGLang && c.ThresholdTokens > 0 {
		w = append(w, fmt.Sprintf("threshold_tokens: %d in sglang mode sends requests below it straight to a decoder, "+
			"and an SGLang PD decoder (--disaggregation-mode decode) refuses a request without bootstrap fields "+
			"(400); use 0 unless the decode pool also serves requests on its own", c.ThresholdTokens))
	}
	return w
}
