"""What runs on the cluster: parsing, ingest, sampling, device activity, alerts, the query lifecycle."""
