import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Apache Kafka's Java consumer (classic protocol) or producer on real records, for the gateway's
 * client tests (tests/gateway/test_clients.py): the twin of tests/support/record_client.py, same
 * command line and JSON lines (its docstring has them). Compiled by the test itself (javac
 * against tests/java's jars), outside tests/java's Maven build.
 *
 * <p>usage: RecordClient java consume BOOTSTRAP TOPIC GROUP NAME INSTANCE SESSION_TIMEOUT_MS |
 * RecordClient java produce BOOTSTRAP TOPIC START COUNT
 */
public final class RecordClient {
  static synchronized void emit(String event, String fields) {
    StringBuilder b = new StringBuilder("{\"event\": \"").append(event).append('"');
    if (!fields.isEmpty()) b.append(", ").append(fields);
    b.append(", \"t\": ").append(System.currentTimeMillis() / 1000.0).append('}');
    System.out.println(b);
    System.out.flush();
  }

  static String str(String s) {
    return '"' + s.replace("\\", "\\\\").replace("\"", "\\\"") + '"';
  }

  static String partitions(Collection<TopicPartition> tps) {
    TreeSet<Integer> ps = new TreeSet<>();
    for (TopicPartition tp : tps) ps.add(tp.partition());
    return "\"partitions\": " + ps;
  }

  public static void main(String[] argv) {
    try {
      if (argv[1].equals("produce")) {
        produce(argv[2], argv[3], Integer.parseInt(argv[4]), Integer.parseInt(argv[5]));
      } else {
        consume(argv[2], argv[3], argv[4], argv[5], argv[6], Integer.parseInt(argv[7]));
      }
      System.exit(0);
    } catch (Throwable e) {
      emit("error", "\"error\": " + str(e.toString()));
      System.exit(1);
    }
  }

  static void produce(String bootstrap, String topic, int start, int count) throws Exception {
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
      List<Future<RecordMetadata>> sent = new ArrayList<>();
      for (int i = start; i < start + count; i++) {
        byte[] key = String.valueOf(i).getBytes(StandardCharsets.UTF_8);
        byte[] value = ("record-" + i).getBytes(StandardCharsets.UTF_8);
        sent.add(producer.send(new ProducerRecord<>(topic, key, value)));
      }
      producer.flush();
      for (Future<RecordMetadata> f : sent) f.get(60, TimeUnit.SECONDS);
    }
    emit("produced", "\"count\": " + count);
  }

  static void consume(
      String bootstrap, String topic, String group, String name, String instance, int sessionMs) {
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
    p.put(ConsumerConfig.CLIENT_ID_CONFIG, name);
    if (!instance.equals("-")) p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instance);
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, sessionMs);
    p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 1000);
    p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, 200);
    p.put(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, 1000);
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    AtomicBoolean quit = new AtomicBoolean();
    Thread stdin =
        new Thread(
            () -> {
              try (BufferedReader r =
                  new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null && !line.trim().equals("quit")) {}
              } catch (Exception e) {
                // the end of stdin is a quit too
              }
              quit.set(true);
            });
    stdin.setDaemon(true);
    stdin.start();
    Map<Integer, Long> pending = new HashMap<>();
    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
      consumer.subscribe(
          List.of(topic),
          new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> revoked) {
              for (TopicPartition tp : revoked) pending.remove(tp.partition());
              emit("revoked", partitions(revoked));
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> assigned) {
              int generation = consumer.groupMetadata().generationId();
              emit("assigned", partitions(assigned) + ", \"generation\": " + generation);
            }
          });
      emit("ready", "");
      while (!quit.get()) {
        ConsumerRecords<byte[], byte[]> records;
        try {
          records = consumer.poll(Duration.ofMillis(200));
        } catch (RetriableException e) {
          emit("poll_error", "\"error\": " + str(e.toString()));
          continue;
        }
        if (!records.isEmpty()) {
          StringBuilder b = new StringBuilder("\"records\": [");
          boolean first = true;
          for (ConsumerRecord<byte[], byte[]> r : records) {
            if (!first) b.append(", ");
            first = false;
            String v = new String(r.value(), StandardCharsets.UTF_8);
            b.append('[').append(r.partition()).append(", ").append(r.offset()).append(", ");
            b.append(str(v)).append(']');
            pending.merge(r.partition(), r.offset() + 1, Math::max);
          }
          emit("records", b.append(']').toString());
        }
        if (!pending.isEmpty()) {
          Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
          StringBuilder b = new StringBuilder("\"offsets\": {");
          for (Map.Entry<Integer, Long> e : pending.entrySet()) {
            offsets.put(new TopicPartition(topic, e.getKey()), new OffsetAndMetadata(e.getValue()));
            if (b.length() > 12) b.append(", ");
            b.append(str(String.valueOf(e.getKey()))).append(": ").append(e.getValue());
          }
          try {
            consumer.commitSync(offsets, Duration.ofSeconds(15));
            emit("committed", b.append('}').toString());
            pending.clear();
          } catch (Exception e) {
            emit("commit_error", "\"error\": " + str(e.toString()));
          }
        }
      }
    }
    emit("closed", "");
  }
}
