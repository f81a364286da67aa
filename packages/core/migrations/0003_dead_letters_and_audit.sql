-- inboxed migration 0003_dead_letters_and_audit
CREATE TABLE IF NOT EXISTS "inbox_dead_letters" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"consumer" text NOT NULL,
	"message_id" text NOT NULL,
	"reason" text NOT NULL,
	"error_code" text,
	"error" text,
	"attempts" integer NOT NULL,
	"first_attempt_at" timestamp with time zone,
	"last_attempt_at" timestamp with time zone,
	"destination" text,
	"source" text,
	"dead_lettered_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "inbox_audit" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"at" timestamp with time zone DEFAULT now() NOT NULL,
	"actor" text NOT NULL,
	"action" text NOT NULL,
	"consumer" text,
	"message_id" text,
	"reason" text,
	"before" jsonb,
	"after" jsonb
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "inbox_dead_letters_message_idx" ON "inbox_dead_letters" USING btree ("consumer","message_id");
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "inbox_dead_letters_at_idx" ON "inbox_dead_letters" USING btree ("dead_lettered_at");
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "inbox_audit_at_idx" ON "inbox_audit" USING btree ("at");
