package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/pkg/reading"
)

// estimateFamilies are the node collector's families for modelled zones:
// the estimate, its band and what it was built from. They exist only for
// zones a model estimates (the estimator), one series each.
type estimateFamilies struct {
	watts, lower, upper, info *desc
}

func newEstimateFamilies() estimateFamilies {
	labels := []string{"zone", "socket", "source", "method"}
	return estimateFamilies{
		watts: newDesc("node", "estimated_power_watts", "The model's power estimate for the zone at the last interval's utilization (method is always estimated).", labels...),
		lower: newDesc("node", "estimated_power_lower_watts", "Lower bound of the estimate's band: the fit's 5% residual quantile on results it was not fitted on (docs/meters.md).", labels...),
		upper: newDesc("node", "estimated_power_upper_watts", "Upper bound of the estimate's band: the fit's 95% residual quantile on results it was not fitted on (docs/meters.md).", labels...),
		info: newDesc("node", "estimator_info", "What the zone's estimate is built from: curve (server, package, vm), tier (cpu, arch, generic, configuration: how much of the CPU the model knew), the normalised CPU model, its microarchitecture and the coefficients' source. Always 1.",
			"zone", "socket", "source", "curve", "tier", "cpu", "arch", "coefficients"),
	}
}

func (f estimateFamilies) describe(ch chan<- *prometheus.Desc) {
	describeAll(ch, f.watts, f.lower, f.upper, f.info)
}

func (f estimateFamilies) update(out *sink, est []reading.Estimate) {
	for _, e := range est {
		socket := socketLabel(e.Socket)
		m := method(true)
		out.add(f.watts, prometheus.GaugeValue, e.Watts, e.Name, socket, e.Source, m)
		out.add(f.lower, prometheus.GaugeValue, e.LowerW, e.Name, socket, e.Source, m)
		out.add(f.upper, prometheus.GaugeValue, e.UpperW, e.Name, socket, e.Source, m)
		out.add(f.info, prometheus.GaugeValue, 1, e.Name, socket, e.Source, e.Curve, e.Tier, e.CPU, e.Arch, e.Coefficients)
	}
}
