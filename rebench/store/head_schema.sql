-- The schema rebench's migrations end at, as SQLite stores it; a new database is made from it.
-- Written by `python -m rebench.store.head_schema`: do not edit.
CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);
CREATE TABLE campaigns (
	id INTEGER NOT NULL, 
	created_at DATETIME NOT NULL, 
	spec JSON NOT NULL, 
	status VARCHAR(16) NOT NULL, concurrency JSON, 
	PRIMARY KEY (id)
);
CREATE TABLE attempts (
	id INTEGER NOT NULL, 
	campaign_id INTEGER, 
	source VARCHAR(16) NOT NULL, 
	environment VARCHAR(64) NOT NULL, 
	env_version VARCHAR(32) NOT NULL, 
	profile VARCHAR(32) NOT NULL, 
	agent VARCHAR(128) NOT NULL, 
	model VARCHAR(128), 
	budget_s FLOAT NOT NULL, 
	seed INTEGER NOT NULL, 
	backend VARCHAR(16), 
	image_id VARCHAR(128), 
	status VARCHAR(16) NOT NULL, 
	error_source VARCHAR(16), 
	error_message TEXT, 
	limit_reason VARCHAR(32), 
	retry_of INTEGER, 
	counted BOOLEAN NOT NULL, 
	pid INTEGER, 
	created_at DATETIME NOT NULL, 
	started_at DATETIME, 
	ended_at DATETIME, 
	wall_s FLOAT NOT NULL, 
	working_s FLOAT NOT NULL, 
	model_wait_s FLOAT NOT NULL, 
	input_tokens INTEGER NOT NULL, 
	output_tokens INTEGER NOT NULL, 
	cached_tokens INTEGER NOT NULL, 
	cost_usd FLOAT NOT NULL, 
	submitted BOOLEAN NOT NULL, 
	final_raw FLOAT, 
	final_normalized FLOAT, 
	anchors_kind VARCHAR(16), 
	snapshot_path TEXT, 
	import_sha256 VARCHAR(64), 
	import_row INTEGER, 
	external_id VARCHAR(128), final_rule VARCHAR(16), rule_raw FLOAT, rule_normalized FLOAT, network VARCHAR(8) DEFAULT 'none' NOT NULL, rebench_version VARCHAR(32), env_hash VARCHAR(16), waiting_for VARCHAR(64), 
	PRIMARY KEY (id), 
	CONSTRAINT uq_attempt_import_provenance UNIQUE (import_sha256, import_row), 
	FOREIGN KEY(campaign_id) REFERENCES campaigns (id), 
	FOREIGN KEY(retry_of) REFERENCES attempts (id)
);
CREATE TABLE events (
	id INTEGER NOT NULL, 
	attempt_id INTEGER NOT NULL, 
	seq INTEGER NOT NULL, 
	kind VARCHAR(32) NOT NULL, 
	working_s FLOAT NOT NULL, 
	duration_s FLOAT NOT NULL, 
	created_at DATETIME NOT NULL, 
	data JSON NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(attempt_id) REFERENCES attempts (id)
);
CREATE TABLE score_events (
	id INTEGER NOT NULL, 
	attempt_id INTEGER NOT NULL, 
	kind VARCHAR(16) NOT NULL, 
	working_s FLOAT NOT NULL, 
	raw FLOAT, 
	valid BOOLEAN NOT NULL, 
	message JSON NOT NULL, 
	details JSON NOT NULL, 
	duration_s FLOAT NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(attempt_id) REFERENCES attempts (id)
);
CREATE TABLE pauses (
	id INTEGER NOT NULL, 
	attempt_id INTEGER NOT NULL, 
	reason VARCHAR(32) NOT NULL, 
	start_s FLOAT NOT NULL, 
	end_s FLOAT, 
	PRIMARY KEY (id), 
	FOREIGN KEY(attempt_id) REFERENCES attempts (id)
);
CREATE TABLE calibrations (
	id INTEGER NOT NULL, 
	environment VARCHAR(64) NOT NULL, 
	env_version VARCHAR(32) NOT NULL, 
	profile VARCHAR(32) NOT NULL, 
	hardware VARCHAR(64) NOT NULL, 
	hardware_description TEXT NOT NULL, 
	start_raw FLOAT NOT NULL, 
	reference_raw FLOAT NOT NULL, 
	samples JSON NOT NULL, 
	created_at DATETIME NOT NULL, heldout_start_raw FLOAT, heldout_reference_raw FLOAT, 
	PRIMARY KEY (id)
);
CREATE TABLE noise_measurements (
	id INTEGER NOT NULL, 
	environment VARCHAR(64) NOT NULL, 
	env_version VARCHAR(32) NOT NULL, 
	profile VARCHAR(32) NOT NULL, 
	hardware VARCHAR(64) NOT NULL, 
	hardware_description TEXT NOT NULL, 
	n INTEGER NOT NULL, 
	start_mean FLOAT NOT NULL, 
	start_sd FLOAT NOT NULL, 
	reference_mean FLOAT NOT NULL, 
	reference_sd FLOAT NOT NULL, 
	start_sd_normalized FLOAT NOT NULL, 
	final_start_sd_normalized FLOAT, 
	summary JSON NOT NULL, 
	samples JSON NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id)
);
CREATE TABLE human_sessions (
	attempt_id INTEGER NOT NULL, 
	expert VARCHAR(128) NOT NULL, 
	public_key TEXT NOT NULL, 
	key_fingerprint VARCHAR(128) NOT NULL, 
	bind VARCHAR(64) NOT NULL, 
	port INTEGER, 
	gate_dir TEXT, 
	container_id VARCHAR(128), 
	supervisor_pid INTEGER, 
	supervisor_host VARCHAR(255), 
	heartbeat_at DATETIME, 
	clock_origin FLOAT, 
	state VARCHAR(16) NOT NULL, 
	stop_requested TEXT, 
	created_at DATETIME NOT NULL, gpus JSON, 
	PRIMARY KEY (attempt_id), 
	FOREIGN KEY(attempt_id) REFERENCES attempts (id)
);
CREATE TABLE pause_corrections (
	id INTEGER NOT NULL, 
	attempt_id INTEGER NOT NULL, 
	start_s FLOAT NOT NULL, 
	end_s FLOAT NOT NULL, 
	reason TEXT NOT NULL, 
	author VARCHAR(128) NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(attempt_id) REFERENCES attempts (id)
);
CREATE TABLE gateway_requests (
	id INTEGER NOT NULL, 
	attempt_id INTEGER NOT NULL, 
	meter VARCHAR(16) NOT NULL, 
	model VARCHAR(128) NOT NULL, 
	endpoint VARCHAR(64) NOT NULL, 
	status INTEGER NOT NULL, 
	input_tokens INTEGER NOT NULL, 
	output_tokens INTEGER NOT NULL, 
	cost_usd FLOAT NOT NULL, 
	latency_s FLOAT NOT NULL, 
	error TEXT, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(attempt_id) REFERENCES attempts (id)
);
CREATE TABLE leases (
	id INTEGER NOT NULL, 
	kind VARCHAR(16) NOT NULL, 
	host VARCHAR(255) NOT NULL, 
	device INTEGER, 
	attempt_id INTEGER, 
	campaign_id INTEGER, 
	priority INTEGER NOT NULL, 
	waiting_gpus INTEGER NOT NULL, 
	holder_pid INTEGER NOT NULL, 
	holder_host VARCHAR(255) NOT NULL, 
	acquired_at DATETIME NOT NULL, 
	heartbeat_at DATETIME NOT NULL, 
	released_at DATETIME, 
	release_reason TEXT, 
	PRIMARY KEY (id), 
	FOREIGN KEY(attempt_id) REFERENCES attempts (id), 
	FOREIGN KEY(campaign_id) REFERENCES campaigns (id)
);
CREATE TABLE store_settings (
	"key" VARCHAR(64) NOT NULL, 
	value TEXT NOT NULL, 
	PRIMARY KEY ("key")
);
CREATE TABLE rescore_runs (
	id INTEGER NOT NULL, 
	created_at DATETIME NOT NULL, 
	finished_at DATETIME, 
	status VARCHAR(16) NOT NULL, 
	selection JSON NOT NULL, 
	attempt_ids JSON NOT NULL, 
	backend VARCHAR(16) NOT NULL, 
	hardware VARCHAR(64) NOT NULL, 
	hardware_description TEXT NOT NULL, 
	environments JSON NOT NULL, 
	kit_version VARCHAR(64) NOT NULL, 
	parallel INTEGER NOT NULL, 
	pid INTEGER, 
	host VARCHAR(255), 
	PRIMARY KEY (id)
);
CREATE TABLE rescores (
	id INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	attempt_id INTEGER NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	reason TEXT, 
	rule VARCHAR(16), 
	env_version VARCHAR(32), 
	content_hash VARCHAR(64), 
	final_raw FLOAT, 
	final_normalized FLOAT, 
	anchors_start FLOAT, 
	anchors_reference FLOAT, 
	anchors_kind VARCHAR(16), 
	heldout_raw FLOAT, 
	heldout_normalized FLOAT, 
	scores JSON NOT NULL, 
	skipped_snapshots JSON NOT NULL, 
	duration_s FLOAT NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_rescore_run_attempt UNIQUE (run_id, attempt_id), 
	FOREIGN KEY(run_id) REFERENCES rescore_runs (id), 
	FOREIGN KEY(attempt_id) REFERENCES attempts (id)
);
CREATE INDEX ix_attempts_agent ON attempts (agent);
CREATE INDEX ix_attempts_campaign_id ON attempts (campaign_id);
CREATE INDEX ix_attempts_environment ON attempts (environment);
CREATE INDEX ix_attempts_status ON attempts (status);
CREATE INDEX ix_calibrations_environment ON calibrations (environment);
CREATE INDEX ix_calibrations_hardware ON calibrations (hardware);
CREATE INDEX ix_events_attempt_id ON events (attempt_id);
CREATE INDEX ix_gateway_requests_attempt_id ON gateway_requests (attempt_id);
CREATE INDEX ix_human_sessions_expert ON human_sessions (expert);
CREATE INDEX ix_leases_active ON leases (released_at, host);
CREATE INDEX ix_leases_attempt_id ON leases (attempt_id);
CREATE INDEX ix_leases_campaign_id ON leases (campaign_id);
CREATE INDEX ix_noise_measurements_environment ON noise_measurements (environment);
CREATE INDEX ix_noise_measurements_hardware ON noise_measurements (hardware);
CREATE INDEX ix_pause_corrections_attempt_id ON pause_corrections (attempt_id);
CREATE INDEX ix_pauses_attempt_id ON pauses (attempt_id);
CREATE INDEX ix_rescores_attempt_id ON rescores (attempt_id);
CREATE INDEX ix_rescores_run_id ON rescores (run_id);
CREATE INDEX ix_score_events_attempt_id ON score_events (attempt_id);
CREATE UNIQUE INDEX uq_attempt_source_external_id ON attempts (source, external_id);
CREATE UNIQUE INDEX uq_leases_active_campaign ON leases (campaign_id) WHERE released_at IS NULL AND kind = 'campaign';
CREATE UNIQUE INDEX uq_leases_active_device ON leases (host, device) WHERE released_at IS NULL AND device IS NOT NULL;
INSERT INTO alembic_version (version_num) VALUES ('0013');
