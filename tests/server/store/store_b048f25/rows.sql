-- Rows of every table, as a state dir made by b048f25 holds them (portable SQL: SQLite and PostgreSQL).
INSERT INTO users (name, org, admin, created_at) VALUES ('admin', 'default', TRUE, 1700000000.0);
INSERT INTO users (name, org, admin, created_at) VALUES ('alice', 'acme', FALSE, 1700000001.0);
INSERT INTO groups (name, org) VALUES ('default', 'default');
INSERT INTO groups (name, org) VALUES ('team', 'acme');
INSERT INTO memberships ("user", "group") VALUES ('admin', 'default');
INSERT INTO memberships ("user", "group") VALUES ('alice', 'team');
INSERT INTO workflows (id, entry, owner, org, created_at, definition, "values", endpoint_id, stop_requested)
  VALUES ('wf-old', 'simulated-model', 'alice', 'acme', 1700000002.0, 'ciphertext-of-the-definition', 'MinReplicas=1',
          'ep-old', FALSE);
INSERT INTO endpoints (id, workflow_id, service, scope, owner, org, groups, model_id, created_at, service_url, annotations)
  VALUES ('ep-old', 'wf-old', 'replicas', 'organization', 'alice', 'acme', '["team"]', 'sim/model', 1700000002.0, NULL,
          '{"pool": true, "min_replicas": 1, "max_replicas": 2}');
INSERT INTO replicas (copy_id, endpoint_id, workflow_id, url, ready, draining, updated_at)
  VALUES ('wf-old.copy-1', 'ep-old', 'wf-old', 'http://127.0.0.1:30001', TRUE, FALSE, 1700000003.0);
INSERT INTO nodes (id, address, engine, labels, taints, gpus, cpus, memory_gb, draining, last_heartbeat, port_start,
                   port_end, volumes)
  VALUES ('node-1', '127.0.0.1', 'simulator', '{}', '[]', '[{"index": 0, "memory_gb": 80}, {"index": 1, "memory_gb": 80}]',
          8, 64.0, FALSE, 1700000004.0, 30000, 30100, '[]');
INSERT INTO allocations (node_id, gpu_index, copy_id, fenced) VALUES ('node-1', 0, 'wf-old.copy-1', NULL);
INSERT INTO ports (node_id, port, owner, fenced) VALUES ('node-1', 30001, 'wf-old.copy-1', NULL);
INSERT INTO reservations (copy_id, workflow_id, placement, created_at)
  VALUES ('wf-old.copy-1', 'wf-old', '{"copy_id": "wf-old.copy-1", "ranks": [{"rank": 0, "node_id": "node-1", "address": "127.0.0.1", "gpus": [0], "port": 30001}], "master_port": 0}',
          1700000003.0);
INSERT INTO secrets (ref, scope, owner, name, type, ciphertext, created_at, created_by)
  VALUES ('organization/acme/hf', 'organization', 'acme', 'hf', 'hf', 'ciphertext-of-the-secret', 1700000005.0, 'alice');
INSERT INTO api_tokens (id, "user", kind, note, created_at, expires_at, minted_by, revoked_at, revoked_by)
  VALUES ('jti-old', 'alice', 'user', 'from before the upgrade', 1700000006.0, 4000000000.0, 'admin', NULL, NULL);
INSERT INTO token_cutoffs ("user", not_before, "by") VALUES ('alice', 1600000000.0, 'admin');
