"""What the platform noticed and proposes: load, drift, SRM, uncovered-cluster and router alarms, drift reports and nightly evaluations."""
