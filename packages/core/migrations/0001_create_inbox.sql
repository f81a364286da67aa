-- inboxed migration 0001_create_inbox
CREATE TABLE IF NOT EXISTS "inbox" (
	"consumer" text NOT NULL,
	"message_id" text NOT NULL,
	"fingerprint" text,
	"status" text NOT NULL,
	"reason" text,
	"source" text,
	"received_at" timestamp with time zone DEFAULT now() NOT NULL,
	"completed_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "inbox_pkey" PRIMARY KEY("consumer","message_id")
);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "inbox_attempts" (
	"consumer" text NOT NULL,
	"message_id" text NOT NULL,
	"attempts" integer NOT NULL,
	"first_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
	"last_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
	"last_error" text,
	"last_error_code" text,
	CONSTRAINT "inbox_attempts_pkey" PRIMARY KEY("consumer","message_id")
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "inbox_completed_at_idx" ON "inbox" USING btree ("completed_at");
