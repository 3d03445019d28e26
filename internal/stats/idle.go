package stats

import (
	"github.com/wattrace/wattrace/pkg/model"
)

// learnThreshold is the utilization below which an interval's power may
// teach the learned idle model: low enough that dynamic power is small.
const learnThreshold = 0.1

// idleModels picks each zone's idle model: configured watts first, then
// what the meter knows (an estimator's model), else one learned from
// quiet intervals.
type idleModels struct {
	watts map[string]float64
	meter Meter
}

func (m *idleModels) model(zone string) model.IdleModel {
	if w, ok := m.watts[zone]; ok {
		if md, err := model.NewConfiguredIdle(w); err == nil { // validated in New
			return md
		}
	}
	if i, ok := m.meter.(IdleModeler); ok {
		if w, ok := i.IdleWatts(zone); ok {
			if md, err := model.NewConfiguredIdle(w); err == nil {
				return md
			}
		}
	}
	return model.NewLearnedIdle(learnThreshold)
}
