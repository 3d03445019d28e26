package power

// Zones lists every zone name a meter may report, for validating the
// per-zone configuration maps: a typo there must stop start-up, not leave
// the zone silently unconfigured.
var Zones = []string{ZonePackage, ZoneCore, ZoneUncore, ZoneDRAM, ZonePsys, ZoneGPU, ZonePlatform}
