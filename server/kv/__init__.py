"""KV snapshots of primary-key tables, snapshot leases and log retention."""
