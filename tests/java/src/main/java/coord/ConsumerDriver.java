package coord;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.LinkedBlockingQueue;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Apache Kafka's Java consumer (classic group protocol) driven over stdin, reporting JSON lines on
 * stdout: the Java twin of tests/support/consumer.py, with the same command line and events.
 *
 * <p>usage: ConsumerDriver CLIENT BOOTSTRAP GROUP TOPIC [--instance ID] [--strategy NAME]
 * [--session-timeout-ms MS] [--heartbeat-interval-ms MS] [--client-id ID] [--no-subscribe]
 * [--poll-ms MS]. CLIENT is ignored ("java"). Commands: {@code commit OFFSET}, {@code committed
 * [P,P,...]}, {@code close}. Events: ready, assigned, revoked (lost=true for onPartitionsLost),
 * committed, commit_retry, offsets, closed, error; assigned/revoked/committed carry the member id
 * and generation the consumer holds.
 *
 * <p>For the benchmark (bench/kafka_peer.py), two timed commands: {@code subscribe AT_MS} (with
 * --no-subscribe: subscribe at that wall-clock instant, so JVMs started one after another join
 * together; event subscribed) and {@code commits START_MS END_MS} (synchronous one-partition
 * commits in a loop over that window, reported by one commits event: a stdin round trip per
 * commit would measure the driver's poll loop, not the server).
 */
public final class ConsumerDriver {
  private static final Map<String, String> STRATEGIES =
      Map.of(
          "range", RangeAssignor.class.getName(),
          "roundrobin", RoundRobinAssignor.class.getName(),
          "sticky", StickyAssignor.class.getName(),
          "cooperative-sticky", CooperativeStickyAssignor.class.getName());

  private final Map<String, String> opts = new HashMap<>();
  private final List<String> positional = new ArrayList<>();
  private KafkaConsumer<byte[], byte[]> consumer;
  private final Set<Integer> owned = new TreeSet<>();
  private String topic;
  private boolean subscribed;

  public static void main(String[] argv) {
    try {
      new ConsumerDriver().run(argv);
    } catch (Throwable e) {
      emit("error", Map.of("error", e.toString()));
      System.exit(1);
    }
  }

  // --- JSON lines ---------------------------------------------------------------------------

  static String json(Object v) {
    if (v == null) return "null";
    if (v instanceof Number || v instanceof Boolean) return v.toString();
    if (v instanceof Map<?, ?> m) {
      StringBuilder b = new StringBuilder("{");
      for (Map.Entry<?, ?> e : m.entrySet()) {
        if (b.length() > 1) b.append(", ");
        b.append(json(String.valueOf(e.getKey()))).append(": ").append(json(e.getValue()));
      }
      return b.append("}").toString();
    }
    if (v instanceof Collection<?> c) {
      StringBuilder b = new StringBuilder("[");
      for (Object o : c) {
        if (b.length() > 1) b.append(", ");
        b.append(json(o));
      }
      return b.append("]").toString();
    }
    StringBuilder b = new StringBuilder("\"");
    for (char ch : v.toString().toCharArray()) {
      switch (ch) {
        case '"' -> b.append("\\\"");
        case '\\' -> b.append("\\\\");
        case '\n' -> b.append("\\n");
        case '\r' -> b.append("\\r");
        case '\t' -> b.append("\\t");
        default -> {
          if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch));
          else b.append(ch);
        }
      }
    }
    return b.append("\"").toString();
  }

  static synchronized void emit(String event, Map<String, ?> fields) {
    Map<String, Object> all = new LinkedHashMap<>();
    all.put("event", event);
    all.put("t", System.currentTimeMillis() / 1000.0);
    all.putAll(fields);
    System.out.println(json(all));
    System.out.flush();
  }

  private Map<String, Object> member() {
    Map<String, Object> out = new LinkedHashMap<>();
    try {
      ConsumerGroupMetadata g = consumer.groupMetadata();
      out.put("member", g.memberId());
      out.put("generation", g.generationId());
    } catch (RuntimeException e) {
      // diagnostics only
    }
    return out;
  }

  private static List<Integer> parts(Collection<TopicPartition> tps) {
    return new ArrayList<>(new TreeSet<>(tps.stream().map(TopicPartition::partition).toList()));
  }

  // --- the consumer -------------------------------------------------------------------------

  private void parse(String[] argv) {
    for (int i = 0; i < argv.length; i++) {
      String a = argv[i];
      if (a.equals("--no-subscribe")) opts.put("no-subscribe", "true");
      else if (a.startsWith("--")) opts.put(a.substring(2), argv[++i]);
      else positional.add(a);
    }
    if (positional.size() != 4) {
      throw new IllegalArgumentException("usage: CLIENT BOOTSTRAP GROUP TOPIC [options]");
    }
  }

  private void run(String[] argv) throws Exception {
    parse(argv);
    topic = positional.get(3);
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, positional.get(1));
    p.put(ConsumerConfig.GROUP_ID_CONFIG, positional.get(2));
    p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, opts.getOrDefault("session-timeout-ms", "10000"));
    p.put(
        ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG,
        opts.getOrDefault("heartbeat-interval-ms", "500"));
    p.put(
        ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
        STRATEGIES.get(opts.getOrDefault("strategy", "range")));
    p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "200");
    p.put(ConsumerConfig.RETRY_BACKOFF_MS_CONFIG, "100");
    p.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "5000");
    if (opts.containsKey("client-id")) p.put(ConsumerConfig.CLIENT_ID_CONFIG, opts.get("client-id"));
    if (opts.containsKey("instance")) {
      p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, opts.get("instance"));
    }
    if (opts.containsKey("request-timeout-ms")) {
      p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, opts.get("request-timeout-ms"));
    }
    long pollMs = Long.parseLong(opts.getOrDefault("poll-ms", "100"));
    boolean subscribe = !opts.containsKey("no-subscribe");
    consumer = new KafkaConsumer<>(p);
    if (subscribe) subscribe();
    LinkedBlockingQueue<String> commands = new LinkedBlockingQueue<>();
    Thread pump =
        new Thread(
            () -> {
              try (BufferedReader r =
                  new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) commands.add(line.trim());
              } catch (Exception e) {
                // stdin closed
              }
              commands.add("close");
            });
    pump.setDaemon(true);
    pump.start();
    emit("ready", Map.of());
    while (true) {
      if (subscribed) consumer.poll(Duration.ofMillis(pollMs));
      else Thread.sleep(100);
      String cmd = commands.poll();
      if (cmd == null) continue;
      String[] vp = cmd.split(" ", 2);
      String arg = vp.length > 1 ? vp[1].trim() : "";
      try {
        switch (vp[0]) {
          case "commit" -> commit(Long.parseLong(arg));
          case "committed" -> committed(arg);
          case "subscribe" -> {
            sleepUntil(Long.parseLong(arg));
            subscribe();
            emit("subscribed", Map.of());
          }
          case "commits" -> {
            String[] w = arg.split(" ");
            commits(Long.parseLong(w[0]), Long.parseLong(w[1]));
          }
          case "close" -> {
            consumer.close();
            emit("closed", Map.of());
            return;
          }
          default -> emit("error", Map.of("cmd", cmd, "error", "unknown command"));
        }
      } catch (Exception e) {
        emit("error", Map.of("cmd", cmd, "error", e.toString()));
      }
    }
  }

  private void subscribe() {
    consumer.subscribe(
        List.of(topic),
        new ConsumerRebalanceListener() {
          @Override
          public void onPartitionsRevoked(Collection<TopicPartition> tps) {
            tps.forEach(tp -> owned.remove(tp.partition()));
            Map<String, Object> f = new LinkedHashMap<>();
            f.put("partitions", parts(tps));
            f.put("all", new ArrayList<>(owned));
            f.putAll(member());
            emit("revoked", f);
          }

          @Override
          public void onPartitionsLost(Collection<TopicPartition> tps) {
            tps.forEach(tp -> owned.remove(tp.partition()));
            Map<String, Object> f = new LinkedHashMap<>();
            f.put("partitions", parts(tps));
            f.put("all", new ArrayList<>(owned));
            f.put("lost", true);
            f.putAll(member());
            emit("revoked", f);
          }

          @Override
          public void onPartitionsAssigned(Collection<TopicPartition> tps) {
            tps.forEach(tp -> owned.add(tp.partition()));
            Map<String, Object> f = new LinkedHashMap<>();
            f.put("partitions", parts(tps));
            f.put("all", new ArrayList<>(owned));
            f.putAll(member());
            emit("assigned", f);
          }
        });
    subscribed = true;
  }

  private void commit(long offset) {
    long deadline = System.currentTimeMillis() + 30_000;
    while (true) {
      List<Integer> mine = new ArrayList<>(owned);
      Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
      for (int part : mine) offsets.put(new TopicPartition(topic, part), new OffsetAndMetadata(offset));
      try {
        consumer.commitSync(offsets);
        Map<String, Object> f = new LinkedHashMap<>();
        f.put("partitions", mine);
        f.put("offset", offset);
        f.putAll(member());
        emit("committed", f);
        return;
      } catch (RebalanceInProgressException e) {
        if (System.currentTimeMillis() > deadline) throw e;
        emit("commit_retry", Map.of("error", e.toString()));
        consumer.poll(Duration.ofMillis(200));
      }
    }
  }

  private static void sleepUntil(long epochMs) throws InterruptedException {
    long left = epochMs - System.currentTimeMillis();
    if (left > 0) Thread.sleep(left);
  }

  private void commits(long startMs, long endMs) throws InterruptedException {
    int part = owned.iterator().next();
    TopicPartition tp = new TopicPartition(topic, part);
    long ok = 0;
    long errors = 0;
    long offset = 0;
    sleepUntil(startMs);
    long lateMs = System.currentTimeMillis() - startMs;
    while (System.currentTimeMillis() < endMs) {
      offset++;
      try {
        consumer.commitSync(Map.of(tp, new OffsetAndMetadata(offset)));
        if (System.currentTimeMillis() <= endMs) ok++;
      } catch (RuntimeException e) {
        errors++;
      }
    }
    emit("commits", Map.of("partition", part, "ok", ok, "errors", errors, "late_ms", lateMs));
  }

  private void committed(String arg) {
    List<Integer> wanted = new ArrayList<>();
    if (arg.isEmpty()) wanted.addAll(owned);
    else for (String s : arg.split(",")) if (!s.isEmpty()) wanted.add(Integer.parseInt(s));
    Set<TopicPartition> tps = new java.util.HashSet<>();
    for (int part : wanted) tps.add(new TopicPartition(topic, part));
    Map<TopicPartition, OffsetAndMetadata> got = consumer.committed(tps, Duration.ofSeconds(20));
    Map<String, Object> out = new LinkedHashMap<>();
    for (int part : wanted) {
      OffsetAndMetadata o = got.get(new TopicPartition(topic, part));
      out.put(String.valueOf(part), o == null || o.offset() < 0 ? null : o.offset());
    }
    emit("offsets", Map.of("offsets", out));
  }
}
