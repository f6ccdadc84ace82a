-- The store's schema as today's main (b048f25) made it with create_all from server/models.py (postgresql.sql dialect),
-- frozen here so tests/server/test_store_migrations.py can upgrade a database made by that release.
CREATE TABLE allocations (
	id SERIAL NOT NULL, 
	node_id VARCHAR(128) NOT NULL, 
	gpu_index INTEGER NOT NULL, 
	copy_id VARCHAR(160) NOT NULL, 
	fenced BOOLEAN, 
	PRIMARY KEY (id), 
	UNIQUE (node_id, gpu_index)
);
CREATE INDEX ix_allocations_copy_id ON allocations (copy_id);
CREATE TABLE api_tokens (
	id VARCHAR(64) NOT NULL, 
	"user" VARCHAR(128) NOT NULL, 
	kind VARCHAR(32) NOT NULL, 
	note VARCHAR(200) NOT NULL, 
	created_at FLOAT NOT NULL, 
	expires_at FLOAT NOT NULL, 
	minted_by VARCHAR(128), 
	revoked_at FLOAT, 
	revoked_by VARCHAR(128), 
	PRIMARY KEY (id)
);
CREATE INDEX ix_api_tokens_revoked_at ON api_tokens (revoked_at);
CREATE INDEX ix_api_tokens_user ON api_tokens ("user");
CREATE TABLE endpoints (
	id VARCHAR(64) NOT NULL, 
	workflow_id VARCHAR(128) NOT NULL, 
	service VARCHAR(64) NOT NULL, 
	scope VARCHAR(32) NOT NULL, 
	owner VARCHAR(128) NOT NULL, 
	org VARCHAR(128) NOT NULL, 
	groups JSON NOT NULL, 
	model_id VARCHAR(256), 
	created_at FLOAT NOT NULL, 
	service_url VARCHAR(512), 
	annotations JSON NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_endpoints_workflow_id ON endpoints (workflow_id);
CREATE TABLE groups (
	name VARCHAR(128) NOT NULL, 
	org VARCHAR(128) NOT NULL, 
	PRIMARY KEY (name)
);
CREATE TABLE memberships (
	"user" VARCHAR(128) NOT NULL, 
	"group" VARCHAR(128) NOT NULL, 
	PRIMARY KEY ("user", "group")
);
CREATE TABLE nodes (
	id VARCHAR(128) NOT NULL, 
	address VARCHAR(256) NOT NULL, 
	engine VARCHAR(32) NOT NULL, 
	labels JSON NOT NULL, 
	taints JSON NOT NULL, 
	gpus JSON NOT NULL, 
	cpus INTEGER NOT NULL, 
	memory_gb FLOAT NOT NULL, 
	draining BOOLEAN NOT NULL, 
	last_heartbeat FLOAT NOT NULL, 
	port_start INTEGER NOT NULL, 
	port_end INTEGER NOT NULL, 
	volumes JSON NOT NULL, 
	PRIMARY KEY (id)
);
CREATE TABLE ports (
	id SERIAL NOT NULL, 
	node_id VARCHAR(128) NOT NULL, 
	port INTEGER NOT NULL, 
	owner VARCHAR(160) NOT NULL, 
	fenced BOOLEAN, 
	PRIMARY KEY (id), 
	UNIQUE (node_id, port)
);
CREATE INDEX ix_ports_owner ON ports (owner);
CREATE TABLE replicas (
	copy_id VARCHAR(160) NOT NULL, 
	endpoint_id VARCHAR(64) NOT NULL, 
	workflow_id VARCHAR(128) NOT NULL, 
	url VARCHAR(512) NOT NULL, 
	ready BOOLEAN NOT NULL, 
	draining BOOLEAN NOT NULL, 
	updated_at FLOAT NOT NULL, 
	PRIMARY KEY (copy_id)
);
CREATE INDEX ix_replicas_endpoint_id ON replicas (endpoint_id);
CREATE INDEX ix_replicas_workflow_id ON replicas (workflow_id);
CREATE TABLE reservations (
	copy_id VARCHAR(160) NOT NULL, 
	workflow_id VARCHAR(128) NOT NULL, 
	placement JSON NOT NULL, 
	created_at FLOAT NOT NULL, 
	PRIMARY KEY (copy_id)
);
CREATE INDEX ix_reservations_workflow_id ON reservations (workflow_id);
CREATE TABLE secrets (
	ref VARCHAR(300) NOT NULL, 
	scope VARCHAR(32) NOT NULL, 
	owner VARCHAR(128) NOT NULL, 
	name VARCHAR(128) NOT NULL, 
	type VARCHAR(32) NOT NULL, 
	ciphertext TEXT NOT NULL, 
	created_at FLOAT NOT NULL, 
	created_by VARCHAR(128), 
	PRIMARY KEY (ref)
);
CREATE TABLE token_cutoffs (
	"user" VARCHAR(128) NOT NULL, 
	not_before FLOAT NOT NULL, 
	by VARCHAR(128) NOT NULL, 
	PRIMARY KEY ("user")
);
CREATE TABLE users (
	name VARCHAR(128) NOT NULL, 
	org VARCHAR(128) NOT NULL, 
	admin BOOLEAN NOT NULL, 
	created_at FLOAT NOT NULL, 
	PRIMARY KEY (name)
);
CREATE TABLE workflows (
	id VARCHAR(128) NOT NULL, 
	entry VARCHAR(128) NOT NULL, 
	owner VARCHAR(128) NOT NULL, 
	org VARCHAR(128) NOT NULL, 
	created_at FLOAT NOT NULL, 
	definition TEXT NOT NULL, 
	values TEXT NOT NULL, 
	endpoint_id VARCHAR(64) NOT NULL, 
	stop_requested BOOLEAN NOT NULL, 
	PRIMARY KEY (id)
);
